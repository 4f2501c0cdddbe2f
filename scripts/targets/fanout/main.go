// fanout: the main goroutine spawns K CPU-bound goroutines in a quick loop. They land on
// main's P (runnext / local runq), so with GOMAXPROCS>=2 the other Ps must steal them.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"

	"gmpmon/targets/internal/gate"
)

var sink uint64

func main() {
	k := flag.Int("k", 16, "goroutines to spawn")
	work := flag.Int("work", 20000000, "arithmetic rounds per goroutine")
	flag.Parse()
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	gate.Ready()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < *k; i++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			v := gate.Work(n + *work)
			mu.Lock()
			sink ^= v
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	fmt.Println("done")
}
