// stacks: goroutines parked at known stacks, for checking gmpmon's goroutine dump against the
// program's own /debug/pprof/goroutine?debug=2 (served on -port). Each kind parks -each
// goroutines (and -n more in chan receive, for the 100k benchmark); -running goroutines spin.
// Parked in: chan receive (through nested and inlined calls), select, sync.Mutex, time.Sleep,
// a blocking read(2) on a pipe (a syscall), sync.Cond, sync.WaitGroup and RWMutex.
// Stdlib only; builds with Go 1.19 to 1.27.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"gmpmon/targets/internal/gate"
)

var sink int64

//go:noinline
func recvDeep(c chan int, depth int) int {
	if depth > 0 {
		return recvDeep(c, depth-1) + 1
	}
	return <-c
}

// inlined into its callers: the dump shows it as an inlined frame.
func recvInl(c chan int) int { return <-c }

func recvOuter(c chan int) int { return recvInl(c) * 2 }

//go:noinline
func recvLeaf(c chan int) { sink += int64(recvOuter(c)) }

//go:noinline
func selectWait(a, b chan int) {
	select {
	case v := <-a:
		sink += int64(v)
	case v := <-b:
		sink += int64(v)
	}
}

//go:noinline
func lockWait(mu *sync.Mutex) {
	mu.Lock()
	sink++
	mu.Unlock()
}

//go:noinline
func rlockWait(mu *sync.RWMutex) {
	mu.RLock()
	sink++
	mu.RUnlock()
}

//go:noinline
func sleepLong() { time.Sleep(24 * time.Hour) }

//go:noinline
func pipeRead(fd int) {
	var b [1]byte
	_, _ = syscall.Read(fd, b[:]) // a raw fd: a blocking read(2), not the netpoller
}

//go:noinline
func condWait(mu *sync.Mutex, c *sync.Cond) {
	mu.Lock()
	c.Wait()
	mu.Unlock()
}

//go:noinline
func wgWait(wg *sync.WaitGroup) { wg.Wait() }

//go:noinline
func spin(stop *int32) {
	x := 0
	for *(*int32)(stop) == 0 {
		x++
	}
	sink += int64(x)
}

func main() {
	port := flag.Int("port", 0, "serve net/http/pprof on 127.0.0.1:PORT (0: no server)")
	each := flag.Int("each", 20, "goroutines parked in each kind of wait")
	n := flag.Int("n", 0, "more goroutines parked in chan receive (for 100k dumps)")
	running := flag.Int("running", 2, "goroutines that spin")
	syscalls := flag.Int("syscalls", 3, "goroutines blocked in read(2) on a pipe (one thread each)")
	flag.Parse()

	never := make(chan int)
	var mu sync.Mutex
	mu.Lock() // held for ever: Lock parks
	var rw sync.RWMutex
	rw.Lock()
	var cmu sync.Mutex
	cond := sync.NewCond(&cmu)
	var wg sync.WaitGroup
	wg.Add(1)
	var stop int32

	for i := 0; i < *each; i++ {
		go recvDeep(never, 3)
		go recvLeaf(never)
		go selectWait(never, never)
		go lockWait(&mu)
		go rlockWait(&rw)
		go sleepLong()
		go condWait(&cmu, cond)
		go wgWait(&wg)
	}
	for i := 0; i < *n; i++ {
		go recvLeaf(never)
	}
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		fmt.Fprintln(os.Stderr, "stacks: pipe:", err)
		os.Exit(1)
	}
	for i := 0; i < *syscalls; i++ {
		go pipeRead(fds[0])
	}
	for i := 0; i < *running; i++ {
		go spin(&stop)
	}
	if *port != 0 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
		if err != nil {
			fmt.Fprintln(os.Stderr, "stacks:", err)
			os.Exit(1)
		}
		http.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("ok\n")) // the benchmark's load (scripts/bench-goroutines)
		})
		go func() { _ = http.Serve(ln, nil) }()
	}
	for runtime.NumGoroutine() < 8**each+*n+*syscalls+*running {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let them reach their parks
	fmt.Println("goroutines", runtime.NumGoroutine())
	gate.Ready()
	select {}
}
