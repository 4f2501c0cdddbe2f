// cgocall: a cgo program (built with CGO_ENABLED=1: dynamically linked against libc, threads
// made by pthread_create). Goroutines call into C, which the runtime treats as a syscall
// (cgocall -> entersyscall/exitsyscall):
//
//	-sleepers K   goroutines calling C's usleep(-us): blocked in C, their Ps retaken (hand-offs)
//	-spinners K   goroutines calling c_spin: on a CPU in C code, outside Go
//	-locked K     goroutines locked to their thread (LockOSThread) that spin in C on every tick
//	              of a 1 ms ticker: each wait parks a locked goroutine (stoplockedm hands its
//	              P off) and each call runs C on that thread
//	-workers K    goroutines burning CPU in Go, so retaken Ps have work to go to
//
// Once they are all started it prints "goroutines N" (runtime.NumGoroutine()); at the end
// "cgocalls N" (runtime.NumCgoCall() after "ready" minus before it:
// the runtime's own count of C calls made) and "done". -trace-run FILE records a runtime/trace
// of the whole run, stopped before those lines (the oracle of the tests).
package main

/*
#include <stdint.h>
#include <unistd.h>

static void c_sleep(unsigned us) { usleep(us); }

static uint64_t c_spin(uint64_t n) {
	volatile uint64_t x = 0;
	for (uint64_t i = 0; i < n; i++) x += i;
	return x;
}
*/
import "C"

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink atomic.Uint64

//go:noinline
func sleeper(stop *atomic.Bool, us uint) {
	for !stop.Load() {
		C.c_sleep(C.unsigned(us))
	}
}

//go:noinline
func spinner(stop *atomic.Bool) {
	for !stop.Load() {
		sink.Add(uint64(C.c_spin(200000)))
	}
}

//go:noinline
func locked(stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !stop.Load() {
		<-tick.C
		sink.Add(uint64(C.c_spin(20000)))
	}
}

//go:noinline
func worker(stop *atomic.Bool) {
	n := uint64(0)
	for !stop.Load() {
		for i := 0; i < 100000; i++ {
			n += uint64(i) & 3
		}
	}
	sink.Add(n)
}

func main() {
	t := flag.Duration("t", 2*time.Second, "how long to run")
	sleepers := flag.Int("sleepers", 2, "goroutines blocking in C's usleep")
	us := flag.Uint("us", 1000, "microseconds of each usleep")
	spinners := flag.Int("spinners", 1, "goroutines spinning in C")
	lockedN := flag.Int("locked", 1, "goroutines locked to their thread, spinning in C on each tick")
	workers := flag.Int("workers", 1, "goroutines burning CPU in Go")
	traceTo := flag.String("trace-run", "", "write a runtime/trace of the run (ready to done) to this file")
	flag.Parse()
	before := runtime.NumCgoCall()
	gate.Ready()
	if *traceTo != "" {
		f, err := os.Create(*traceTo)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "trace:", err)
			os.Exit(1)
		}
		defer f.Close()
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	run := func(k int, f func()) {
		for i := 0; i < k; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
	}
	run(*sleepers, func() { sleeper(&stop, *us) })
	run(*spinners, func() { spinner(&stop) })
	run(*lockedN, func() { locked(&stop) })
	run(*workers, func() { worker(&stop) })
	fmt.Println("goroutines", runtime.NumGoroutine())
	time.Sleep(*t)
	stop.Store(true)
	wg.Wait()
	if *traceTo != "" {
		trace.Stop()
	}
	fmt.Println("cgocalls", runtime.NumCgoCall()-before)
	fmt.Println("done")
}
