// lifecycle: a steady scheduler workload that reports its own progress and, on request,
// changes under a tracer: it execs another binary, forks children, or exits. The hardening
// tests use it to measure a target's speed before, during and after gmpmon, and to check
// that gmpmon notices a target that exits or execs.
//
//	-report D       print "ops <total> <unix ns>" every D (the progress rate)
//	-exec PATH      on SIGUSR1 (or after -after, if set), replace this process with PATH
//	                (args after "--"); without -exec, SIGUSR1 makes it exit with -code
//	-fork-every D   every D, run this binary again as a short-lived child (-child)
//	-exit-after D   exit with -code after D
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

var ops int64

// pingPong bounces a value between two goroutines over unbuffered channels: every op is a
// park, a ready and an execute, so gmpmon's hot probes fire a few times per op.
func pingPong() {
	ping, pong := make(chan int64), make(chan int64)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
	}()
	for v := int64(0); ; {
		ping <- v
		v = <-pong
		atomic.AddInt64(&ops, 1)
	}
}

func child() {
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); gate.Work(10000) }()
	}
	wg.Wait()
	fmt.Println("child done")
}

func main() {
	report := flag.Duration("report", 100*time.Millisecond, "progress line interval")
	execPath := flag.String("exec", "", "exec this binary after -after")
	after := flag.Duration("after", 0, "exec after D instead of on SIGUSR1")
	forkEvery := flag.Duration("fork-every", 0, "run a child copy of this binary every D")
	exitAfter := flag.Duration("exit-after", 0, "exit after D")
	code := flag.Int("code", 0, "exit code for -exit-after")
	isChild := flag.Bool("child", false, "internal: the child of -fork-every")
	flag.Parse()
	if *isChild {
		child()
		return
	}
	gate.Ready()
	go pingPong()
	start := time.Now()
	if *forkEvery > 0 {
		go func() {
			self, _ := os.Executable()
			for n := 1; ; n++ {
				time.Sleep(*forkEvery)
				out, err := exec.Command(self, "-child").Output()
				fmt.Printf("forked %d %q %v\n", n, string(out), err)
			}
		}()
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var cue int32
	go func() { <-usr1; atomic.StoreInt32(&cue, 1) }()
	tick := time.NewTicker(*report)
	for now := range tick.C {
		fmt.Printf("ops %d %d\n", atomic.LoadInt64(&ops), now.UnixNano())
		if (*exitAfter > 0 && now.Sub(start) >= *exitAfter) || (atomic.LoadInt32(&cue) == 1 && *execPath == "") {
			fmt.Println("exiting")
			os.Exit(*code)
		}
		if *execPath != "" && (atomic.LoadInt32(&cue) == 1 || (*after > 0 && now.Sub(start) >= *after)) {
			fmt.Println("exec", *execPath)
			argv := append([]string{*execPath}, flag.Args()...)
			err := syscall.Exec(*execPath, argv, os.Environ())
			fmt.Println("exec failed:", err)
			os.Exit(1)
		}
	}
}
