// blocksys: goroutines in main.slowSyscall block in raw nanosleep(2) syscalls of -d (15 ms:
// longer than sysmon's 10 ms limit, so every one loses its P to a hand-off), while two CPU
// goroutines keep the other Ps' run queues busy (syscall-handoff).
package main

import (
	"flag"
	"fmt"
	"sync"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

//go:noinline
func slowSyscall(d time.Duration) {
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
				slowSyscall(*d)
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
