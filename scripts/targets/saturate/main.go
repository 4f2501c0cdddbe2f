// saturate: more CPU work than Ps. -w workers each take jobs of ~1 ms of pure computation from
// a channel that a producer keeps full: every P runs all the time and the woken workers wait
// in the run queues for a P (cpu-saturation). Run with GOMAXPROCS=2 and -w 8.
package main

import (
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func crunch(n int) uint64 {
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	w := flag.Int("w", 8, "workers")
	n := flag.Int("n", 400000, "iterations per job (~1 ms)")
	flag.Parse()
	gate.Ready()
	jobs := make(chan int, 64)
	var done int64
	var wg sync.WaitGroup
	for i := 0; i < *w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if crunch(j) == 0 {
					fmt.Println("never")
				}
				atomic.AddInt64(&done, 1)
			}
		}()
	}
	deadline := time.Now().Add(*t)
	for time.Now().Before(deadline) {
		jobs <- *n
	}
	close(jobs)
	wg.Wait()
	fmt.Println("done", atomic.LoadInt64(&done))
}
