// rtcounters: a workload that reads the runtime's own view of itself, for gmpmon's
// runtime-counter and census fidelity tests.
//
// At start it parks -chan goroutines on a channel receive and -sleep goroutines in
// time.Sleep, runs two GCs (so the runtime sets their g.waitsince), prints "ready", then
// obeys one command per stdin line:
//
//	count      print "count N" with runtime.NumGoroutine() (a quiet moment: nothing runs)
//	phase S    run S seconds of scheduling, mutex contention and GCs; print "phase {json}"
//	           with the runtime/metrics deltas over the phase (histograms as bucket deltas)
//	gosched S  S seconds of 4 goroutines that burn 200 µs and call runtime.Gosched (each
//	           a fresh time slice from the global queue: one schedtick); print "gosched N"
//	quit       exit
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var names = []string{
	"/sched/latencies:seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/total/other:seconds",
	"/sync/mutex/wait/total:seconds",
	"/gc/cycles/total:gc-cycles",
}

type hist struct {
	Buckets []string `json:"buckets"`
	Counts  []uint64 `json:"counts"`
}

func read() []metrics.Sample {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	var s []metrics.Sample
	for _, n := range names {
		if known[n] {
			s = append(s, metrics.Sample{Name: n})
		}
	}
	metrics.Read(s)
	return s
}

func fmtBound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	if math.IsInf(b, -1) {
		return "-Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

func delta(before, after []metrics.Sample) map[string]interface{} {
	out := map[string]interface{}{}
	for i, a := range after {
		b := before[i]
		switch a.Value.Kind() {
		case metrics.KindFloat64Histogram:
			ha, hb := a.Value.Float64Histogram(), b.Value.Float64Histogram()
			h := hist{}
			for _, x := range ha.Buckets {
				h.Buckets = append(h.Buckets, fmtBound(x))
			}
			for j := range ha.Counts {
				h.Counts = append(h.Counts, ha.Counts[j]-hb.Counts[j])
			}
			out[a.Name] = h
		case metrics.KindFloat64:
			out[a.Name] = a.Value.Float64() - b.Value.Float64()
		case metrics.KindUint64:
			out[a.Name] = a.Value.Uint64() - b.Value.Uint64()
		}
	}
	return out
}

func phase(d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Ping-pong pairs: many short runnable -> running transitions.
	for i := 0; i < 4; i++ {
		a, b := make(chan int), make(chan int)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					close(a)
					return
				case a <- 1:
				}
				<-b
			}
		}()
		go func() {
			defer wg.Done()
			for range a {
				b <- 1
			}
		}()
	}
	// Contended sync.Mutex: waits the runtime counts in totalMutexWaitTime.
	var mu sync.Mutex
	var shared int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				t := time.Now()
				for time.Since(t) < 20*time.Microsecond {
					atomic.AddInt64(&shared, 1)
				}
				mu.Unlock()
			}
		}()
	}
	// Gosched loops: goroutines taken from the global queue, each a schedtick.
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
			}
		}()
	}
	// GCs: stop-the-world pauses.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				runtime.GC()
			}
		}
	}()
	time.Sleep(d)
	close(stop)
	wg.Wait()
}

func gosched(d time.Duration) int64 {
	var n int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t := time.Now()
				for time.Since(t) < 200*time.Microsecond {
				}
				atomic.AddInt64(&n, 1)
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	return atomic.LoadInt64(&n)
}

func main() {
	nchan := flag.Int("chan", 300, "goroutines parked on a channel receive")
	nsleep := flag.Int("sleep", 200, "goroutines parked in time.Sleep")
	flag.Parse()
	block := make(chan struct{})
	for i := 0; i < *nchan; i++ {
		go func() { <-block }()
	}
	for i := 0; i < *nsleep; i++ {
		go func() { time.Sleep(time.Hour) }()
	}
	time.Sleep(50 * time.Millisecond) // let them all park
	runtime.GC()
	runtime.GC()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "count":
			fmt.Println("count", runtime.NumGoroutine())
		case "phase":
			secs, _ := strconv.ParseFloat(f[1], 64)
			before := read()
			phase(time.Duration(secs * float64(time.Second)))
			after := read()
			js, _ := json.Marshal(delta(before, after))
			fmt.Println("phase", string(js))
		case "gosched":
			secs, _ := strconv.ParseFloat(f[1], 64)
			fmt.Println("gosched", gosched(time.Duration(secs*float64(time.Second))))
		case "quit":
			return
		}
	}
}
