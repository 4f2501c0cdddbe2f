// runqburst: every -every, main.burst starts -n goroutines in a tight loop, each ~200 µs of
// computation. They go to the creating P's local run queue, which fills to its 256 limit and
// spills half of itself to the global run queue again and again (runq-overflow).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func task(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ (s << 1)
	}
	return s
}

//go:noinline
func burst(n int, wg *sync.WaitGroup) {
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if task(100000) == -1 {
				fmt.Println("never")
			}
		}()
	}
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	n := flag.Int("n", 2000, "goroutines per burst")
	every := flag.Duration("every", 300*time.Millisecond, "time between bursts")
	flag.Parse()
	gate.Ready()
	deadline := time.Now().Add(*t)
	bursts := 0
	for time.Now().Before(deadline) {
		var wg sync.WaitGroup
		burst(*n, &wg)
		wg.Wait()
		bursts++
		time.Sleep(*every)
	}
	fmt.Println("done", bursts)
}
