// parked: -n goroutines parked on channels nobody sends on, and main asleep for -d: every P
// idle (allp[i].m is nil) and allgs unchanged for as long as it runs. The hostile-target
// tests rewrite its runtime memory (tests/integration/test_hostile_target.py).
package main

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	n := flag.Int("n", 1000, "parked goroutines")
	d := flag.Duration("d", time.Minute, "how long main sleeps")
	flag.Parse()
	for i := 0; i < *n; i++ {
		go func(c chan int) { <-c }(make(chan int))
	}
	for runtime.NumGoroutine() < *n+1 {
		runtime.Gosched()
	}
	gate.Ready()
	time.Sleep(*d)
	fmt.Println("done", runtime.NumGoroutine())
}
