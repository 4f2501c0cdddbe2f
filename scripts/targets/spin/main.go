// spin: with GOMAXPROCS=1, one goroutine spins in a loop that makes no calls (the atomic
// load is an intrinsic: a plain MOV), so it never reaches a cooperative preemption point.
// The ticker goroutine and main (waiting for the deadline) only get the P because sysmon
// preempts the spinner asynchronously (SIGURG -> asyncPreempt).
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

var stop int32

//go:noinline
func spinLoop() uint64 {
	var x uint64
	for atomic.LoadInt32(&stop) == 0 {
		x++
	}
	return x
}

func main() {
	t := flag.Duration("t", 2*time.Second, "how long to spin")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	gate.Ready()
	done := make(chan uint64)
	go func() { done <- spinLoop() }()
	var ticks int64
	go func() {
		for atomic.LoadInt32(&stop) == 0 {
			time.Sleep(time.Millisecond)
			atomic.AddInt64(&ticks, 1)
		}
	}()
	time.Sleep(*t)
	atomic.StoreInt32(&stop, 1)
	<-done
	fmt.Println("done")
}
