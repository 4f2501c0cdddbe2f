// idlespin: -pairs pairs of goroutines ping-pong a token over unbuffered channels with almost
// no work in between. Each hand-off readies the partner and wakes another M to look for work
// (wakep), which spins through findRunnable, finds the work already taken and goes back to
// sleep: Ms spinning while no work arrives (idle-spinning). Run with GOMAXPROCS=4 or more.
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	pairs := flag.Int("pairs", 2, "ping-pong pairs")
	gap := flag.Duration("gap", 50*time.Microsecond, "sleep between rounds")
	flag.Parse()
	gate.Ready()
	deadline := time.Now().Add(*t)
	var wg sync.WaitGroup
	rounds := make([]int, *pairs)
	for p := 0; p < *pairs; p++ {
		ping, pong := make(chan int), make(chan int)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for v := range ping {
				pong <- v + 1
			}
			close(pong)
		}()
		go func(p int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				ping <- rounds[p]
				rounds[p] = <-pong
				if *gap > 0 {
					time.Sleep(*gap)
				}
			}
			close(ping)
			for range pong {
			}
		}(p)
	}
	wg.Wait()
	fmt.Println("done", rounds[0])
}
