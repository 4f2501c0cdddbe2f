// lockedthread: main.pinned locks itself to its OS thread (runtime.LockOSThread, as code that
// calls into thread-bound C libraries must) and then waits on a channel a ticker feeds every
// -every. Each wait parks a locked goroutine: its M sleeps with it (stoplockedm) and hands its
// P off, and each wake-up hands a P back to that M (cgo-pinning).
package main

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func pinned(in <-chan int, done chan<- int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := 0
	for v := range in {
		for i := 0; i < 20000; i++ { // ~30 µs of the thread-bound work per message
			n += (v + i) & 1
		}
	}
	done <- n
}

// exiting locks its thread, spins for d and returns still locked: the runtime ends the
// thread with it (an M that exits, as a cgo library's worker thread may).
//
//go:noinline
func exiting(d time.Duration, done chan<- int) {
	runtime.LockOSThread()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		n++
	}
	done <- n
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	every := flag.Duration("every", time.Millisecond, "time between messages to the pinned goroutine")
	k := flag.Int("k", 2, "pinned goroutines")
	exits := flag.Int("exits", 0, "then this many goroutines, one after another, each lock a thread, spin 5 ms and return locked: each takes its thread with it")
	flag.Parse()
	gate.Ready()
	done := make(chan int)
	ins := make([]chan int, *k)
	for i := range ins {
		ins[i] = make(chan int)
		go pinned(ins[i], done)
	}
	tick := time.NewTicker(*every)
	deadline := time.Now().Add(*t)
	for time.Now().Before(deadline) {
		<-tick.C
		for _, c := range ins {
			c <- 1
		}
	}
	for _, c := range ins {
		close(c)
	}
	total := 0
	for range ins {
		total += <-done
	}
	for i := 0; i < *exits; i++ {
		go exiting(5*time.Millisecond, done)
		total += <-done
	}
	fmt.Println("done", total)
}
