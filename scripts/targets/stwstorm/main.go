// stwstorm: the world stops hundreds of times a second (runtime.ReadMemStats in a loop, and a
// GC every -gc) while -n goroutines wake every millisecond for a few microseconds of work:
// wake-ups that land in a pause wait it out, so stop-the-world fills the tail of the
// scheduling latency (gc-stw-latency). 2,000 parked goroutines make each pause longer.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

var keep [][]byte

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	n := flag.Int("n", 16, "goroutines waking every millisecond")
	parked := flag.Int("parked", 2000, "goroutines parked for good (bigger STW pauses)")
	gc := flag.Duration("gc", 20*time.Millisecond, "runtime.GC() every")
	flag.Parse()
	block := make(chan struct{})
	for i := 0; i < *parked; i++ {
		go func() { <-block }()
	}
	for i := 0; i < 2000; i++ {
		keep = append(keep, make([]byte, 4096))
	}
	gate.Ready()
	deadline := time.Now().Add(*t)
	var wg sync.WaitGroup
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				_ = make([]byte, 512)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		last := time.Now()
		for time.Now().Before(deadline) {
			runtime.ReadMemStats(&ms)
			if time.Since(last) >= *gc {
				runtime.GC()
				last = time.Now()
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	wg.Wait()
	close(block)
	fmt.Println("done")
}
