// mutex: G goroutines each take one shared sync.Mutex N times in main.contend and hold it
// in main.holdLock, so lockSlow / SemacquireMutex are reached from main.contend.
// Prints "locks <count>" (count == G*N).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

var (
	mu    sync.Mutex
	count int
)

// holdLock runs with mu held.
//
//go:noinline
func holdLock(hold time.Duration) {
	count++
	gate.Burn(hold)
}

//go:noinline
func contend(n int, hold time.Duration, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; i < n; i++ {
		mu.Lock()
		holdLock(hold)
		mu.Unlock()
	}
}

func main() {
	g := flag.Int("g", 4, "goroutines")
	n := flag.Int("n", 200, "locks per goroutine")
	hold := flag.Duration("hold", 20*time.Microsecond, "how long each lock is held")
	flag.Parse()
	gate.Ready()
	var wg sync.WaitGroup
	for i := 0; i < *g; i++ {
		wg.Add(1)
		go contend(*n, *hold, &wg)
	}
	wg.Wait()
	fmt.Println("locks", count)
}
