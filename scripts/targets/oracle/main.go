// oracle: a mixed workload that measures itself, so that tests can hold gmpmon's numbers
// against the runtime's own view of the same run.
//
// After gate.Ready() it reads runtime/metrics and MemStats, starts runtime/trace into
// -trace-phase, runs every part below for -phase, stops the trace, reads them again and prints
// one line "oracle {json}" with the deltas:
//
//	sleepers  -sleepers goroutines in time.Sleep(-sleep) loops (timer wake-ups: ready)
//	net       a TCP loopback ping-pong (netpoll wake-ups: injectglist, no ready)
//	mutex     -mutex goroutines contending on one sync.Mutex, each holding it -hold
//	gc        runtime.GC() every -gc-every (two stop-the-world pauses each)
//	spin      -spin goroutines burning CPU (preemption, runnable queues)
//
// The mutex profile (SetMutexProfileFraction(1): every contention event) gives the delay
// of sync.Mutex waits; only records whose stack has sync.(*Mutex).Unlock are summed.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"gmpmon/targets/internal/gate"
)

var (
	traceTo  = flag.String("trace-phase", "", "write runtime/trace of the phase to this file")
	phase    = flag.Duration("phase", 2*time.Second, "how long the measured phase lasts")
	sleepers = flag.Int("sleepers", 8, "goroutines in time.Sleep loops")
	sleepD   = flag.Duration("sleep", 500*time.Microsecond, "each sleep")
	netOn    = flag.Bool("net", true, "TCP loopback ping-pong")
	mutexG   = flag.Int("mutex", 4, "goroutines contending on one sync.Mutex")
	hold     = flag.Duration("hold", 20*time.Microsecond, "how long the mutex is held")
	gcEvery  = flag.Duration("gc-every", 50*time.Millisecond, "runtime.GC() period (0: none)")
	spinG    = flag.Int("spin", 0, "CPU-burning goroutines")
	yieldG   = flag.Int("gosched", 0, "goroutines that work a little and call runtime.Gosched")
	burstN   = flag.Int("burst", 0, "goroutines created in a burst every -burst-every (work stealing)")
	burstD   = flag.Duration("burst-every", 2*time.Millisecond, "period of the bursts")
	blockG   = flag.Int("blocksys", 0, "goroutines in blocking nanosleep(2) loops (P hand-offs)")
	blockD   = flag.Duration("blocksys-d", 2*time.Millisecond, "each blocking syscall")
	mutexMu  sync.Mutex
	sink     []byte
)

type hist struct {
	Buckets []float64 `json:"buckets"`
	Counts  []uint64  `json:"counts"`
}

var metricNames = []string{
	"/sched/latencies:seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/total/other:seconds",
	"/sync/mutex/wait/total:seconds",
	"/gc/cycles/total:gc-cycles",
}

func readMetrics() map[string]metrics.Sample {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	var s []metrics.Sample
	for _, n := range metricNames {
		if known[n] {
			s = append(s, metrics.Sample{Name: n})
		}
	}
	metrics.Read(s)
	out := map[string]metrics.Sample{}
	for _, x := range s {
		out[x.Name] = x
	}
	return out
}

func delta(a, b map[string]metrics.Sample) map[string]any {
	out := map[string]any{}
	for name, x := range b {
		y := a[name]
		switch x.Value.Kind() {
		case metrics.KindUint64:
			out[name] = x.Value.Uint64() - y.Value.Uint64()
		case metrics.KindFloat64:
			out[name] = x.Value.Float64() - y.Value.Float64()
		case metrics.KindFloat64Histogram:
			hx, hy := x.Value.Float64Histogram(), y.Value.Float64Histogram()
			h := hist{Buckets: hx.Buckets, Counts: make([]uint64, len(hx.Counts))}
			for i := range hx.Counts {
				h.Counts[i] = hx.Counts[i] - hy.Counts[i]
			}
			// JSON has no Inf: the outer bounds become +-1e300.
			for i, b := range h.Buckets {
				if b > 1e300 {
					h.Buckets[i] = 1e300
				} else if b < -1e300 {
					h.Buckets[i] = -1e300
				}
			}
			out[name] = h
		}
	}
	return out
}

// runtimeLocks counts the records (stacks) of runtime-internal locks the last mutexDelayNs
// left out.
var runtimeLocks int

// mutexDelayNs sums the delay of sync.Mutex records in the mutex profile.
func mutexDelayNs() (float64, uint64) {
	var buf bytes.Buffer
	_ = pprof.Lookup("mutex").WriteTo(&buf, 1)
	runtimeLocks = 0
	sc := bufio.NewScanner(&buf)
	cps := 0.0
	var total float64
	var count uint64
	var cyc float64
	var cnt uint64
	inRec, isMutex := false, false
	flush := func() {
		if inRec && isMutex {
			total += cyc
			count += cnt
		}
		inRec, isMutex = false, false
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "cycles/second=") {
			cps, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "@" {
			flush()
			cyc, _ = strconv.ParseFloat(f[0], 64)
			cnt, _ = strconv.ParseUint(f[1], 10, 64)
			inRec = true
			continue
		}
		// From Go 1.22 the runtime's own locks are in this profile too, with the stack of
		// their unlock: a contended semaphore-root lock released inside Mutex.Unlock has
		// sync.(*Mutex).Unlock on its stack, but no goroutine parked for it.
		if inRec && strings.Contains(line, "\truntime.unlock") {
			inRec = false
			runtimeLocks++
		}
		if inRec && strings.Contains(line, "sync.(*Mutex).Unlock") {
			isMutex = true
		}
		if line == "" {
			flush()
		}
	}
	flush()
	if cps == 0 {
		return 0, count
	}
	return total / cps * 1e9, count
}

// mono is CLOCK_MONOTONIC, the clock of runtime nanotime and of gmpmon's BPF timestamps
// (a 1.21 trace's times are relative to its start: this ties them to the capture).
func mono() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// schedstat sums /proc/self/task/*/schedstat: (ns on a CPU, ns waiting on a run queue).
func schedstat() (int64, int64) {
	var cpu, wait int64
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) >= 2 {
			c, _ := strconv.ParseInt(f[0], 10, 64)
			w, _ := strconv.ParseInt(f[1], 10, 64)
			cpu += c
			wait += w
		}
	}
	return cpu, wait
}

func netPingPong(stop <-chan struct{}, wg *sync.WaitGroup, n *int64) {
	defer wg.Done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "oracle: listen:", err)
		return
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.Copy(c, c)
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "oracle: dial:", err)
		return
	}
	defer c.Close()
	msg := make([]byte, 64)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := c.Write(msg); err != nil {
			return
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		*n++
	}
}

func main() {
	flag.Parse()
	runtime.SetMutexProfileFraction(1)
	gate.Ready()
	var ms0, ms1 runtime.MemStats
	m0 := readMetrics()
	mu0, mc0 := mutexDelayNs()
	runtime.ReadMemStats(&ms0)
	cpu0, wait0 := schedstat()
	startMono := mono()
	if *traceTo != "" {
		f, err := os.Create(*traceTo)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "oracle: -trace:", err)
			os.Exit(1)
		}
		defer f.Close()
	}
	t0 := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sleeps, locks, gcs, pings int64
	var cnt sync.Mutex
	for i := 0; i < *sleepers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for {
				select {
				case <-stop:
					cnt.Lock()
					sleeps += n
					cnt.Unlock()
					return
				default:
				}
				time.Sleep(*sleepD)
				n++
			}
		}()
	}
	for i := 0; i < *mutexG; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for {
				select {
				case <-stop:
					cnt.Lock()
					locks += n
					cnt.Unlock()
					return
				default:
				}
				mutexMu.Lock()
				gate.Burn(*hold)
				mutexMu.Unlock()
				n++
			}
		}()
	}
	for i := 0; i < *spinG; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				gate.Work(100000)
			}
		}()
	}
	var blocked int64
	if *burstN > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(*burstD)
			defer t.Stop()
			var bw sync.WaitGroup
			for {
				select {
				case <-stop:
					bw.Wait()
					return
				case <-t.C:
				}
				for i := 0; i < *burstN; i++ {
					bw.Add(1)
					go func() {
						defer bw.Done()
						gate.Work(20000)
					}()
				}
				bw.Wait()
			}
		}()
	}
	for i := 0; i < *yieldG; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				gate.Work(5000)
				runtime.Gosched()
			}
		}()
	}
	for i := 0; i < *blockG; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.NsecToTimespec(int64(*blockD))
			n := int64(0)
			for {
				select {
				case <-stop:
					cnt.Lock()
					blocked += n
					cnt.Unlock()
					return
				default:
				}
				gate.Work(20000) // some work on the P, so that the P has something to hand off
				_ = syscall.Nanosleep(&ts, nil)
				n++
			}
		}()
	}
	if *netOn {
		wg.Add(1)
		go netPingPong(stop, &wg, &pings)
	}
	if *gcEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(*gcEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					sink = make([]byte, 1<<16)
					runtime.GC()
					gcs++
				}
			}
		}()
	}
	time.Sleep(*phase)
	close(stop)
	wg.Wait()
	elapsed := time.Since(t0)
	if *traceTo != "" {
		trace.Stop()
	}
	stopMono := mono()
	cpu1, wait1 := schedstat()
	runtime.ReadMemStats(&ms1)
	m1 := readMetrics()
	mu1, mc1 := mutexDelayNs()
	out := map[string]any{
		"go":                     runtime.Version(),
		"gomaxprocs":             runtime.GOMAXPROCS(0),
		"phase_ns":               elapsed.Nanoseconds(),
		"start_mono":             startMono,
		"blocking_syscalls":      blocked,
		"stop_mono":              stopMono,
		"schedstat_cpu_ns":       cpu1 - cpu0,
		"schedstat_wait_ns":      wait1 - wait0,
		"sleeps":                 sleeps,
		"locks":                  locks,
		"gcs":                    gcs,
		"pings":                  pings,
		"numgc":                  ms1.NumGC - ms0.NumGC,
		"pause_total_ns":         ms1.PauseTotalNs - ms0.PauseTotalNs,
		"mutex_profile_delay_ns": mu1 - mu0,
		"mutex_profile_count":    mc1 - mc0,
		"runtime_lock_records":   runtimeLocks,
		"metrics":                delta(m0, m1),
	}
	b, _ := json.Marshal(out)
	fmt.Println("oracle " + string(b))
}
