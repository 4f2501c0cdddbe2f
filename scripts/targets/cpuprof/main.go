// cpuprof: goroutines whose CPU use, P and R14 are known, for the perf-event sampler.
//
// -spinners N goroutines (default 3) spin in main.spin on GOMAXPROCS=2 Ps, so sysmon's 10 ms
// preemption rotates them across the Ps. Each logs, from inside the loop, the P it runs on
// (runtime.procPin) whenever it changes, stamped with runtime.nanotime (CLOCK_MONOTONIC, the
// clock of bpf_ktime_get_ns), and prints at the end:
//
//	spinner GOID TS:P TS:P ...
//
// -garbage also runs main.garbageLoop (garbage_amd64.s), an assembly loop that puts a value
// that is not a g into R14 for ~2 ms at a time: alternately a non-canonical address and a
// forged g (fakeG.m = &fakeM, every word of fakeM = &fakeG, so m.curg == m.g0 == g holds and
// only the m.procid == thread id check can reject it). Samples landing there must say
// "not in Go". It prints "garbage CALLS". -hold keeps the process (and its threads' /proc
// schedstat) until a line arrives on stdin after that.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gmpmon/targets/internal/gate"
)

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// garbageLoop spins n iterations with R14 = r14 (garbage_amd64.s).
func garbageLoop(n uint64, r14 uintptr) uint64

var (
	stop  int32
	fakeG [64]uintptr
	fakeM [128]uintptr
	sink  uint64
)

func goid() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	n, _ := strconv.Atoi(f[1])
	return n
}

//go:noinline
func burn(x uint64) uint64 {
	for i := 0; i < 2000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func spin(out *string, wg *sync.WaitGroup) {
	defer wg.Done()
	var b strings.Builder
	fmt.Fprintf(&b, "spinner %d", goid())
	last := -1
	var x uint64 = 1
	for atomic.LoadInt32(&stop) == 0 {
		x = burn(x)
		p := procPin()
		procUnpin()
		if p != last {
			fmt.Fprintf(&b, " %d:%d", nanotime(), p)
			last = p
		}
	}
	atomic.AddUint64(&sink, x)
	*out = b.String()
}

func main() {
	t := flag.Duration("t", 2*time.Second, "how long to spin")
	n := flag.Int("spinners", 3, "spinning goroutines")
	garbage := flag.Bool("garbage", false, "also run the assembly loop with a garbage R14")
	hold := flag.Bool("hold", false, "after printing, wait for a line on stdin before exiting")
	flag.Parse()
	runtime.GOMAXPROCS(2)
	for i := range fakeG {
		fakeG[i] = uintptr(unsafe.Pointer(&fakeM))
	}
	for i := range fakeM {
		fakeM[i] = uintptr(unsafe.Pointer(&fakeG))
	}
	gate.Ready()
	var wg sync.WaitGroup
	outs := make([]string, *n)
	for i := range outs {
		wg.Add(1)
		go spin(&outs[i], &wg)
	}
	calls := 0
	gdone := make(chan struct{})
	go func() {
		defer close(gdone)
		for *garbage && atomic.LoadInt32(&stop) == 0 {
			r14 := uintptr(0x5a5a5a5a5a5a5a5a)
			if calls%2 == 1 {
				r14 = uintptr(unsafe.Pointer(&fakeG))
			}
			atomic.AddUint64(&sink, garbageLoop(2_000_000, r14))
			calls++
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(*t)
	atomic.StoreInt32(&stop, 1)
	wg.Wait()
	<-gdone
	for _, o := range outs {
		fmt.Println(o)
	}
	fmt.Println("garbage", calls)
	if *hold {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
}
