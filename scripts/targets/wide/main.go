// wide: many Ps, few of them busy. GOMAXPROCS -procs (default 64), -n goroutines parked on
// their own channel, and -w wakers that each wake a random one in turn; a woken goroutine
// burns -burn of CPU and parks again. On a 2-CPU machine most of the 64 Ps stay idle while a
// handful run: what the TUI's busy-first order, idle fold and heat strip are for.
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink uint64

func main() {
	procs := flag.Int("procs", 64, "GOMAXPROCS")
	n := flag.Int("n", 2000, "parked goroutines")
	w := flag.Int("w", 6, "wakers")
	burn := flag.Duration("burn", 50*time.Microsecond, "CPU burnt per wake-up")
	d := flag.Duration("d", 0, "run this long, then exit (0: until killed)")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)
	chans := make([]chan struct{}, *n)
	var mu sync.Mutex
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
		go func(c chan struct{}) {
			for range c {
				v := gate.Burn(*burn)
				mu.Lock()
				sink ^= v
				mu.Unlock()
			}
		}(chans[i])
	}
	gate.Ready()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := 0; k < *w; k++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				select {
				case chans[r.Intn(len(chans))] <- struct{}{}:
				default:
				}
				time.Sleep(200 * time.Microsecond)
			}
		}(int64(k))
	}
	if *d > 0 {
		time.Sleep(*d)
		close(stop)
		wg.Wait()
		fmt.Println("done")
		return
	}
	select {}
}
