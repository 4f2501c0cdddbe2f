// runq: more CPU-bound goroutines than Ps (-g, default 6), each burning CPU in short calls
// (preemptible), so every P is running and the rest wait in run queues: a steady, known
// scheduler picture, for comparing two ways of reading the same program (e.g. the default
// and the -s -w build). Prints "ready", runs for -t, prints "done".
package main

import (
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	n := flag.Int("g", 6, "CPU-bound goroutines")
	t := flag.Duration("t", 5*time.Second, "how long to run")
	flag.Parse()
	gate.Ready()
	var stop int32
	for i := 0; i < *n; i++ {
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				gate.Burn(time.Millisecond)
			}
		}()
	}
	time.Sleep(*t)
	atomic.StoreInt32(&stop, 1)
	fmt.Println("done")
}
