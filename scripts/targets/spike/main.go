// spike: a scheduling-latency spike on cue. -sleepers goroutines wake every millisecond
// (timers: short waits for a P while the Ps are free); after -calm, -burners CPU-bound
// goroutines keep every P busy for -spike, so each wake-up waits for a time slice (the
// 10 ms preemption) and the runtime's scheduling-latency p99 jumps from µs to ms. Then it
// is calm again until -t. Prints "spike start" and "spike end" when it happens.
package main

import (
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink uint64

func main() {
	sleepers := flag.Int("sleepers", 10, "goroutines sleeping 1 ms in a loop")
	burners := flag.Int("burners", 8, "CPU-bound goroutines during the spike")
	calm := flag.Duration("calm", 2*time.Second, "calm before the spike")
	spike := flag.Duration("spike", time.Second, "how long the spike lasts")
	t := flag.Duration("t", 5*time.Second, "total run time after ready")
	flag.Parse()
	gate.Ready()
	var wakes int64
	var stop int32
	for i := 0; i < *sleepers; i++ {
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				time.Sleep(time.Millisecond)
				atomic.AddInt64(&wakes, 1)
			}
		}()
	}
	start := time.Now()
	time.Sleep(*calm)
	fmt.Println("spike start")
	var burning int32 = 1
	for i := 0; i < *burners; i++ {
		go func() {
			for atomic.LoadInt32(&burning) == 1 {
				atomic.AddUint64(&sink, gate.Burn(time.Millisecond))
			}
		}()
	}
	time.Sleep(*spike)
	atomic.StoreInt32(&burning, 0)
	fmt.Println("spike end")
	if left := *t - time.Since(start); left > 0 {
		time.Sleep(left)
	}
	atomic.StoreInt32(&stop, 1)
	fmt.Printf("wakes %d\n", atomic.LoadInt64(&wakes))
}
