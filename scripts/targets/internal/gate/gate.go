// Package gate is the start-up handshake every gmpmon test workload shares.
//
// A workload calls gate.Ready() once its goroutines are up. It prints "ready" on its own
// line (os.Stdout is unbuffered in Go, so the line is out as soon as Println returns) and
// then, if asked, holds the workload back so a tracer can attach before the work starts:
//
//	-wait-stdin   block until a line (or EOF) arrives on stdin
//	-delay D      sleep D after "ready"
//	-trace FILE   run Go's own runtime/trace into FILE from then on (the benchmark's baseline)
package gate

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime/trace"
	"time"
)

var (
	waitStdin = flag.Bool("wait-stdin", false, "after printing ready, wait for a line (or EOF) on stdin before working")
	delay     = flag.Duration("delay", 0, "after printing ready, sleep this long before working")
	traceTo   = flag.String("trace", "", "after ready, write a runtime/trace to this file (never stopped: for overhead only)")
)

// Ready prints "ready" and applies -wait-stdin / -delay.
func Ready() {
	fmt.Println("ready")
	if *waitStdin {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	if *delay > 0 {
		time.Sleep(*delay)
	}
	if *traceTo != "" {
		f, err := os.Create(*traceTo)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gate: -trace:", err)
			os.Exit(1)
		}
	}
}

// Burn spins the CPU for about d without blocking, calling only time.Now.
// It stands for "real work" in the workloads.
func Burn(d time.Duration) uint64 {
	var x uint64 = 1
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for i := 0; i < 64; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

// Work does n rounds of arithmetic with no calls at all (a fixed amount of CPU work).
func Work(n int) uint64 {
	var x uint64 = uint64(n) | 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	return x
}
