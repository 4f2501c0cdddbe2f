// busyhttp: a busy server, three HTTP servers in one process on loopback, each a hop of one
// request. The front answers GET / by asking the backend for -fanout items at once (one
// goroutine each); the backend answers GET /item?k=N by asking the store for the key; the
// store answers from a map. Every hop is a keep-alive HTTP/1.1 connection, so one request
// to the front is tens of goroutine starts (the connections' serve, readLoop and writeLoop
// goroutines wake on each hop) and tens of syscalls. Under wrk at GOMAXPROCS=2 it makes
// >= 40k goroutine starts/s and >= 20k syscalls/s (issue 30's busy workload).
//
// Prints "listening <front addr>", then "ready", and serves until killed. The front also
// serves net/http/pprof (/debug/pprof/trace?seconds=N: its own runtime/trace, the oracle).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"strconv"
	"sync"
	"time"

	"gmpmon/targets/internal/gate"
)

func listen(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "busyhttp:", err)
		os.Exit(1)
	}
	return ln
}

func serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil {
			fmt.Fprintln(os.Stderr, "busyhttp:", err)
			os.Exit(1)
		}
	}()
}

// get reads url's whole body with c (keep-alive: the body must be read to the end).
func get(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return b, err
}

func client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512,
			IdleConnTimeout: time.Minute},
		Timeout: 10 * time.Second,
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "the front's listen address")
	fanout := flag.Int("fanout", 2, "backend requests per front request (in parallel)")
	keys := flag.Int("keys", 64, "keys in the store")
	flag.Parse()

	// The store: a map behind a RWMutex.
	var mu sync.RWMutex
	data := make(map[string]string, *keys)
	for i := 0; i < *keys; i++ {
		data[strconv.Itoa(i)] = fmt.Sprintf("value-%d", i)
	}
	storeLn := listen("127.0.0.1:0")
	serve(storeLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.RLock()
		v, ok := data[r.URL.Query().Get("k")]
		mu.RUnlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, v)
	}))
	storeURL := "http://" + storeLn.Addr().String() + "/?k="

	// The backend: one store read per item.
	backendLn := listen("127.0.0.1:0")
	toStore := client()
	serve(backendLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := get(toStore, storeURL+r.URL.Query().Get("k"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = w.Write(b)
	}))
	backendURL := "http://" + backendLn.Addr().String() + "/item?k="

	// The front: -fanout backend items at once.
	toBackend := client()
	var next uint64
	var nextMu sync.Mutex
	mux := http.NewServeMux() // net/http/pprof is on http.DefaultServeMux
	mux.Handle("/debug/pprof/", http.DefaultServeMux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		nextMu.Lock()
		k := next
		next++
		nextMu.Unlock()
		parts := make([][]byte, *fanout)
		errs := make([]error, *fanout)
		var wg sync.WaitGroup
		for i := range parts {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := strconv.FormatUint((k+uint64(i))%uint64(*keys), 10)
				parts[i], errs[i] = get(toBackend, backendURL+key)
			}(i)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
		}
		for _, p := range parts {
			_, _ = w.Write(p)
			_, _ = io.WriteString(w, "\n")
		}
	})
	frontLn := listen(*addr)
	serve(frontLn, mux)
	fmt.Println("listening", frontLn.Addr().String())
	gate.Ready()
	select {}
}
