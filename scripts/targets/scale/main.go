// scale: the scheduler at scale. -procs Ps (64), -g goroutines parked on their own channel
// (100,000), and -wakers goroutines that wake random ones for -t. A woken goroutine counts
// one op and parks again; every -batch sends a waker yields (runtime.Gosched), so woken
// goroutines run instead of waiting for the waker's preemption. At the end it prints
// "ops <wakes handled> rate <per second>", like pingpong. With -count D it also prints
// "goroutines <runtime.NumGoroutine()>" every D from ready on (the census oracle).
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	procs := flag.Int("procs", 64, "GOMAXPROCS")
	n := flag.Int("g", 100000, "parked goroutines")
	wakers := flag.Int("wakers", 64, "goroutines waking random parked ones")
	batch := flag.Int("batch", 8, "sends between a waker's yields")
	t := flag.Duration("t", 10*time.Second, "how long to wake")
	count := flag.Duration("count", 0, "print runtime.NumGoroutine() every this long (0: never)")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)

	var ops int64
	chans := make([]chan struct{}, *n)
	var up sync.WaitGroup
	up.Add(*n)
	for i := range chans {
		c := make(chan struct{}, 1)
		chans[i] = c
		go func() {
			up.Done()
			for range c {
				atomic.AddInt64(&ops, 1)
			}
		}()
	}
	up.Wait()
	if *count > 0 {
		fmt.Printf("goroutines %d\n", runtime.NumGoroutine()+1) // +1: the counter below
		go func() {
			for range time.Tick(*count) {
				fmt.Printf("goroutines %d\n", runtime.NumGoroutine())
			}
		}()
	}
	gate.Ready()

	var stop int32
	var done sync.WaitGroup
	start := time.Now()
	for w := 0; w < *wakers; w++ {
		done.Add(1)
		go func(seed int64) {
			defer done.Done()
			rng := rand.New(rand.NewSource(seed))
			for atomic.LoadInt32(&stop) == 0 {
				for k := 0; k < *batch; k++ {
					select {
					case chans[rng.Intn(len(chans))] <- struct{}{}:
					default:
					}
				}
				runtime.Gosched()
			}
		}(int64(w) + 1)
	}
	time.Sleep(*t)
	atomic.StoreInt32(&stop, 1)
	done.Wait()
	elapsed := time.Since(start).Seconds()
	got := atomic.LoadInt64(&ops)
	fmt.Printf("ops %d rate %.0f\n", got, float64(got)/elapsed)
}
