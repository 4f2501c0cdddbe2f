// pingpong: two goroutines bounce a token over unbuffered channels for -t, then it prints
// "ops <round trips> rate <round trips per second>". The scheduler's hottest path.
package main

import (
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to ping-pong")
	flag.Parse()
	gate.Ready()
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
		close(pong)
	}()
	var stop int32
	timer := time.AfterFunc(*t, func() { atomic.StoreInt32(&stop, 1) })
	defer timer.Stop()
	start := time.Now()
	ops := 0
	for atomic.LoadInt32(&stop) == 0 {
		ping <- ops
		ops = <-pong
	}
	elapsed := time.Since(start).Seconds()
	close(ping)
	fmt.Printf("ops %d rate %.0f\n", ops, float64(ops)/elapsed)
}
