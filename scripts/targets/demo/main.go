// demo is gmpmon's bundled demo workload: it runs until killed and keeps every gmpmon view
// busy at a moderate CPU cost (well under one core on average):
//
//   - a worker pool fed by a channel, with a burst of jobs every few seconds, so local
//     runqs fill up and idle Ps steal;
//   - a contended sync.Mutex held for a while in main.(*ledger).record (mutex view);
//   - tickers that time.Sleep (timers, parks with reason "sleep");
//   - blocking syscalls: syscall.Nanosleep and a read on a raw pipe (syscall hand-offs);
//   - runtime.GC() every couple of seconds (stop-the-world);
//   - a loopback HTTP client/server pair on 127.0.0.1 (netpoller wake-ups).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

type ledger struct {
	mu      sync.Mutex
	entries map[int]uint64
	total   uint64
}

// record takes the ledger's lock and keeps it for hold: the contended mutex of the demo.
//
//go:noinline
func (l *ledger) record(account int, amount uint64, hold time.Duration) {
	l.mu.Lock()
	l.entries[account%64] += amount
	l.total += gate.Burn(hold) & 0xff
	l.mu.Unlock()
}

type job struct {
	id   int
	cost time.Duration
}

func worker(jobs <-chan job, book *ledger, hold time.Duration) {
	for j := range jobs {
		v := gate.Burn(j.cost)
		if j.id%2 == 0 {
			book.record(j.id, v, hold)
		}
	}
}

func producer(jobs chan<- job, rate int, burstEvery time.Duration, burstSize int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	lastBurst := time.Now()
	id := 0
	for range tick.C {
		id++
		jobs <- job{id: id, cost: 150 * time.Microsecond}
		if time.Since(lastBurst) >= burstEvery {
			lastBurst = time.Now()
			// A burst: many short goroutines at once, readied onto this P's runq;
			// the other Ps have to steal them.
			var wg sync.WaitGroup
			for i := 0; i < burstSize; i++ {
				wg.Add(1)
				go func(n int) {
					defer wg.Done()
					gate.Burn(time.Duration(50+n%100) * time.Microsecond)
				}(i)
			}
			wg.Wait()
		}
	}
}

// auditor also wants the ledger every period: with the workers it keeps the lock contended.
func auditor(book *ledger, period, hold time.Duration) {
	for i := 0; ; i++ {
		time.Sleep(period)
		book.record(i, 1, hold)
	}
}

func sleeper(period time.Duration) {
	for {
		time.Sleep(period)
	}
}

// syscaller blocks in the kernel now and then, so its M leaves its P in a syscall.
func syscaller() {
	ts := syscall.Timespec{Nsec: int64(3 * time.Millisecond)}
	for {
		_ = syscall.Nanosleep(&ts, nil)
		time.Sleep(97 * time.Millisecond)
	}
}

// pipeReader blocks in read(2) on a raw (blocking) pipe; pipeWriter feeds it every 200ms.
func pipePair() {
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		fmt.Fprintln(os.Stderr, "demo: pipe:", err)
		return
	}
	go func() {
		buf := make([]byte, 16)
		for {
			if _, err := syscall.Read(fds[0], buf); err != nil {
				return
			}
		}
	}()
	go func() {
		for {
			time.Sleep(200 * time.Millisecond)
			if _, err := syscall.Write(fds[1], []byte("x")); err != nil {
				return
			}
		}
	}()
}

func gcLoop(period time.Duration) {
	var keep [][]byte
	for {
		time.Sleep(period)
		for i := 0; i < 256; i++ {
			keep = append(keep, make([]byte, 4096))
		}
		keep = keep[:0]
		runtime.GC()
	}
}

func httpPair() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: listen:", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		gate.Burn(100 * time.Microsecond)
		_, _ = io.WriteString(w, "ok\n")
	})
	go func() { _ = http.Serve(ln, mux) }()
	url := "http://" + ln.Addr().String() + "/"
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		for {
			if resp, err := client.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			time.Sleep(25 * time.Millisecond)
		}
	}()
}

func main() {
	workers := flag.Int("workers", 4, "worker goroutines in the pool")
	rate := flag.Int("rate", 800, "jobs per second fed to the pool")
	burstEvery := flag.Duration("burst-every", 3*time.Second, "interval between bursts")
	burstSize := flag.Int("burst", 300, "goroutines per burst")
	hold := flag.Duration("hold", 250*time.Microsecond, "how long main.(*ledger).record holds its lock")
	gcEvery := flag.Duration("gc-every", 2*time.Second, "interval between runtime.GC() calls")
	noHTTP := flag.Bool("no-http", false, "skip the loopback HTTP client/server pair")
	flag.Parse()

	book := &ledger{entries: make(map[int]uint64)}
	jobs := make(chan job, 64)
	for i := 0; i < *workers; i++ {
		go worker(jobs, book, *hold)
	}
	go producer(jobs, *rate, *burstEvery, *burstSize)
	go auditor(book, 10*time.Millisecond, *hold)
	go auditor(book, 10*time.Millisecond, *hold)
	go sleeper(10 * time.Millisecond)
	go sleeper(50 * time.Millisecond)
	go syscaller()
	pipePair()
	go gcLoop(*gcEvery)
	if !*noHTTP {
		httpPair()
	}
	gate.Ready()
	select {}
}
