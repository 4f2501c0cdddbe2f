// lockhot: -w goroutines all update one map under one sync.Mutex in main.(*store).put, holding
// it ~50 µs each time: one lock address dominates the wait (lock-contention).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

type store struct {
	mu sync.Mutex
	m  map[int]int
}

//go:noinline
func (s *store) put(k int) {
	s.mu.Lock()
	x := 0
	for i := 0; i < 20000; i++ { // ~50 µs under the lock
		x += i * k
	}
	s.m[k%1024] = x
	s.mu.Unlock()
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	w := flag.Int("w", 8, "goroutines")
	flag.Parse()
	gate.Ready()
	s := &store{m: map[int]int{}}
	deadline := time.Now().Add(*t)
	var wg sync.WaitGroup
	for i := 0; i < *w; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := i; time.Now().Before(deadline); k += *w {
				s.put(k)
				time.Sleep(50 * time.Microsecond)
			}
		}(i)
	}
	wg.Wait()
	fmt.Println("done", len(s.m))
}
