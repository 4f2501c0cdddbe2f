// healthy: what a mostly idle service looks like to the scheduler. Twenty goroutines wake
// every 20-50 ms, do ~20 µs of work and a channel hand-off, and sleep again; a little
// allocation, no blocking syscalls, no contention. The findings engine must stay quiet on it
// in every mode (tests/integration/test_findings.py).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func work(n int) int {
	s := 0
	buf := make([]byte, 256)
	for i := 0; i < n; i++ {
		s += int(buf[i%len(buf)]) + i
	}
	return s
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	n := flag.Int("n", 20, "goroutines")
	flag.Parse()
	gate.Ready()
	deadline := time.Now().Add(*t)
	events := make(chan int, 64)
	var wg sync.WaitGroup
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				time.Sleep(time.Duration(20+i%4*10) * time.Millisecond)
				events <- work(2000)
			}
		}(i)
	}
	total := 0
	go func() {
		for v := range events {
			total += v & 1
		}
	}()
	wg.Wait()
	close(events)
	fmt.Println("done")
}
