// blocksys: goroutines in main.slowSyscall block in raw nanosleep(2) syscalls of -d (15 ms:
// longer than sysmon's 10 ms limit, so every one loses its P to a hand-off), while two CPU
// goroutines keep the other Ps' run queues busy (syscall-handoff). Each call first prepares
// its request for ~-prep of CPU in main.slowSyscall itself, as real code does around a
// syscall: that is where perf samples find the syscall goroutines (a 15-ms sleep with
// nothing around it is on a CPU for a few µs, and 99-999 Hz samples catch it by luck).
package main

import (
	"flag"
	"fmt"
	"sync"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink int

//go:noinline
func slowSyscall(d, prep time.Duration) {
	s := 0
	for end := time.Now().Add(prep); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			s += i ^ (s >> 3)
		}
	}
	sink = s
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ (s >> 3)
	}
	return s
}

func main() {
	t := flag.Duration("t", 3*time.Second, "how long to run")
	n := flag.Int("n", 4, "goroutines making blocking syscalls")
	d := flag.Duration("d", 15*time.Millisecond, "length of each syscall")
	prep := flag.Duration("prep", 300*time.Microsecond, "CPU before each syscall")
	flag.Parse()
	gate.Ready()
	deadline := time.Now().Add(*t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls := 0
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				slowSyscall(*d, *prep)
				mu.Lock()
				calls++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if spin(100000) == -1 {
					fmt.Println("never")
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	fmt.Println("done", calls)
}
