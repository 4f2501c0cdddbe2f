// syscall: one goroutine makes N blocking syscalls of about 1ms (nanosleep(2)) while other
// goroutines keep computing, so sysmon hands the blocked M's P to another M. Prints "syscalls N".
package main

import (
	"flag"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	n := flag.Int("n", 100, "number of blocking syscalls")
	d := flag.Duration("d", time.Millisecond, "length of each syscall")
	busy := flag.Int("busy", 2, "goroutines computing meanwhile")
	flag.Parse()
	gate.Ready()
	var stop int32
	for i := 0; i < *busy; i++ {
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				gate.Burn(200 * time.Microsecond)
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	done := make(chan int)
	go func() {
		ts := syscall.NsecToTimespec(int64(*d))
		count := 0
		for i := 0; i < *n; i++ {
			for syscall.Nanosleep(&ts, nil) == syscall.EINTR {
			}
			count++
		}
		done <- count
	}()
	count := <-done
	atomic.StoreInt32(&stop, 1)
	fmt.Println("syscalls", count)
}
