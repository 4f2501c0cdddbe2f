// leak: main.serve starts a goroutine (main.handle) per "request", -rate a second; each waits
// for a reply on a channel nobody ever sends on, so live goroutines grow steadily, all in
// "chan receive" (goroutine-leak). -gc-every runs runtime.GC() that often (a server that
// allocates collects often; this one allocates too little): each GC sets g.waitsince on the
// parked goroutines, so the census can tell how long they have waited.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func handle(reply chan int) {
	<-reply // never sent: the goroutine leaks
}

//go:noinline
func serve(d time.Duration, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		<-tick.C
		go handle(make(chan int))
	}
}

func main() {
	t := flag.Duration("t", 7*time.Second, "how long to run")
	rate := flag.Int("rate", 200, "leaked goroutines per second")
	gcEvery := flag.Duration("gc-every", 0, "run runtime.GC() this often (0: never)")
	flag.Parse()
	gate.Ready()
	if *gcEvery > 0 {
		go func() {
			for range time.Tick(*gcEvery) {
				runtime.GC()
			}
		}()
	}
	serve(*t, *rate)
	fmt.Println("done", runtime.NumGoroutine())
}
