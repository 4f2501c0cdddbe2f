// leak: main.serve starts a goroutine (main.handle) per "request", -rate a second; each waits
// for a reply on a channel nobody ever sends on, so live goroutines grow steadily, all in
// "chan receive" (goroutine-leak).
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
	flag.Parse()
	gate.Ready()
	serve(*t, *rate)
	fmt.Println("done", runtime.NumGoroutine())
}
