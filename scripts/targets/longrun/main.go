// longrun: one goroutine (main.hotLoop) runs 60 ms stretches of a loop with no function call
// (no cooperative preemption point: sysmon must preempt it with a signal), sleeping 20 ms in
// between; a ticker goroutine waits for a P meanwhile (long-running-goroutine).
package main

import (
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink uint64

//go:noinline
func hotLoop(d time.Duration) {
	end := time.Now().Add(d)
	for {
		var x uint64
		for i := 0; i < 2000000; i++ { // ~2-5 ms without a call
			x += uint64(i) * 2654435761
		}
		atomic.AddUint64(&sink, x)
		if time.Now().After(end) {
			return
		}
	}
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	stretch := flag.Duration("stretch", 60*time.Millisecond, "length of each busy stretch")
	flag.Parse()
	gate.Ready()
	deadline := time.Now().Add(*t)
	done := make(chan struct{})
	go func() {
		for time.Now().Before(deadline) {
			hotLoop(*stretch)
			time.Sleep(20 * time.Millisecond)
		}
		close(done)
	}()
	ticks := 0
	tk := time.NewTicker(2 * time.Millisecond)
	for {
		select {
		case <-tk.C:
			ticks++
			continue
		case <-done:
		}
		break
	}
	fmt.Println("done", ticks)
}
