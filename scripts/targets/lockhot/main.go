// lockhot: -w goroutines all update one map under one sync.Mutex in main.(*store).put, holding
// it ~50 µs each time, then working ~50 µs outside it: one lock address dominates the wait
// (lock-contention). The work outside is a CPU loop, not time.Sleep(50µs): a sleep that
// short lasts 50 µs or ~1 ms depending on the timers of the moment, and the same run saw
// 2,000 or 130,000 contended Locks in 3 s.
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

var sink int

//go:noinline
func outside(k int) {
	x := 0
	for i := 0; i < 20000; i++ { // ~50 µs, like the work under the lock
		x += i ^ k
	}
	sink = x
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
				outside(k)
			}
		}(i)
	}
	wg.Wait()
	fmt.Println("done", len(s.m))
}
