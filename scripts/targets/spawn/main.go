// spawn: creates exactly N goroutines that each exit at once, waits, prints "spawned N".
package main

import (
	"flag"
	"fmt"
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
	fmt.Println("spawned", atomic.LoadInt64(&ran))
}
