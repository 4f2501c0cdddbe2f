// loop: runs forever doing moderate scheduler work (channel ping every ms, short-lived
// goroutines, a mutex, sleeps), for attach/detach tests. Prints "ready".
package main

import (
	"flag"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	spawnEvery := flag.Duration("spawn-every", 10*time.Millisecond, "interval between spawn rounds")
	flag.Parse()
	var mu sync.Mutex
	var n uint64
	ping, pong := make(chan uint64), make(chan uint64)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
	}()
	go func() {
		var v uint64
		for {
			ping <- v
			v = <-pong
			time.Sleep(time.Millisecond)
		}
	}()
	go func() {
		for {
			var wg sync.WaitGroup
			for i := 0; i < 10; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					x := gate.Burn(20 * time.Microsecond)
					mu.Lock()
					n += x
					mu.Unlock()
				}()
			}
			wg.Wait()
			time.Sleep(*spawnEvery)
		}
	}()
	gate.Ready()
	select {}
}
