// sleeper: N sequential time.Sleep calls in one goroutine, then "done N".
package main

import (
	"flag"
	"fmt"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	n := flag.Int("n", 100, "number of sleeps")
	d := flag.Duration("d", time.Millisecond, "length of each sleep")
	flag.Parse()
	gate.Ready()
	done := 0
	for i := 0; i < *n; i++ {
		time.Sleep(*d)
		done++
	}
	fmt.Println("done", done)
}
