// spawn: creates exactly N goroutines that each exit at once, waits, prints "spawned N".
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"gmpmon/targets/internal/gate"
)

func main() {
	n := flag.Int("n", 1000, "goroutines to create")
	flag.Parse()
	gate.Ready()
	var wg sync.WaitGroup
	var ran int64
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func() {
			atomic.AddInt64(&ran, 1)
			wg.Done()
		}()
	}
	wg.Wait()
	// wg.Done runs before its goroutine exits: without this the process could end while the
	// last one is between Done and goexit, and its exit would never happen (a count of N-1).
	for runtime.NumGoroutine() > 1 {
		runtime.Gosched()
	}
	fmt.Println("spawned", atomic.LoadInt64(&ran))
}
