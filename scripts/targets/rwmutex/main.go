// rwmutex: R readers take a shared sync.RWMutex for reading N times each (main.read) while one
// writer takes it N times for writing (main.write); each holds it for -hold, so readers wait
// in RLock for the writer and the writer waits in Lock for the readers. main waits for them
// on a sync.WaitGroup. One writer: the RWMutex's inner sync.Mutex is never contended.
// Prints "done <reads> <writes>".
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

var (
	rw     sync.RWMutex
	reads  int64
	writes int64
)

//go:noinline
func read(n int, hold time.Duration, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; i < n; i++ {
		rw.RLock()
		time.Sleep(hold)
		rw.RUnlock()
		time.Sleep(hold / 2)
	}
}

//go:noinline
func write(n int, hold time.Duration, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; i < n; i++ {
		rw.Lock()
		writes++
		time.Sleep(hold)
		rw.Unlock()
		time.Sleep(hold / 2)
	}
}

func main() {
	r := flag.Int("r", 4, "reader goroutines")
	n := flag.Int("n", 20, "lock rounds per goroutine")
	hold := flag.Duration("hold", time.Millisecond, "how long each lock is held")
	flag.Parse()
	gate.Ready()
	var wg sync.WaitGroup
	for i := 0; i < *r; i++ {
		wg.Add(1)
		go read(*n, *hold, &wg)
	}
	wg.Add(1)
	go write(*n, *hold, &wg)
	wg.Wait()
	reads = int64(*r * *n)
	fmt.Println("done", reads, writes)
}
