// gc: allocates a little garbage and calls runtime.GC() N times, prints "gcs N".
package main

import (
	"flag"
	"fmt"
	"runtime"

	"gmpmon/targets/internal/gate"
)

var keep [][]byte

func main() {
	n := flag.Int("n", 20, "number of runtime.GC() calls")
	flag.Parse()
	gate.Ready()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < *n; i++ {
		for j := 0; j < 64; j++ {
			keep = append(keep, make([]byte, 1024))
		}
		keep = keep[:0]
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	// NumGC counts completed cycles; it can only be >= n (a background cycle may add one).
	if int(after.NumGC-before.NumGC) < *n {
		fmt.Println("gc: fewer cycles than asked:", after.NumGC-before.NumGC)
	}
	fmt.Println("gcs", *n)
}
