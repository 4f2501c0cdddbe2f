// openload: an HTTP load client for scripts/bench-goroutines (not a workload to watch).
//
// Open loop (-rate R): request i is due at start + i/R, whether or not earlier ones have been
// answered; -conns workers send the due requests over keep-alive connections, and a request's
// latency runs from when it was due (as wrk2 counts it), so a server that stalls shows its
// queue in the latencies instead of slowing the client down. Closed loop (-rate 0): each of
// -conns workers sends its next request when the last one is answered (the saturation rate).
//
// Requests are written and their answers parsed by hand over plain TCP (HTTP/1.1
// keep-alive, Content-Length bodies, as Go's net/http server answers): net/http's client
// took ~45 us of CPU per request here, three times what the server spends answering it.
//
// After -seconds (open loop: or at SIGUSR1) it waits up to -grace for requests still out,
// then writes to stdout one line "start UNIX_NS" and one line per request "DUE_US DONE_US" (microseconds after start;
// DONE_US -1: not answered, failed or not 200).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type job struct {
	i   int
	due time.Duration
}

func main() {
	url := flag.String("url", "", "URL to GET")
	rate := flag.Float64("rate", 0, "requests/s offered (0: closed loop)")
	seconds := flag.Float64("seconds", 3, "how long requests are sent")
	conns := flag.Int("conns", 64, "workers, each with its connection")
	grace := flag.Duration("grace", 3*time.Second, "wait for answers after the last request")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "openload: -url is required")
		os.Exit(2)
	}
	u, err := neturl.Parse(*url)
	if err != nil || u.Scheme != "http" {
		fmt.Fprintln(os.Stderr, "openload: -url must be http://HOST:PORT/PATH")
		os.Exit(2)
	}
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n")
	// get returns a worker's function sending one request over its connection (redialled
	// after an error): true when answered 200.
	newGet := func() func() bool {
		var c net.Conn
		var r *bufio.Reader
		fail := func() bool {
			if c != nil {
				c.Close()
				c = nil
			}
			return false
		}
		return func() bool {
			if c == nil {
				var err error
				if c, err = net.Dial("tcp", u.Host); err != nil {
					return fail()
				}
				r = bufio.NewReaderSize(c, 4096)
			}
			if _, err := c.Write(req); err != nil {
				return fail()
			}
			status, err := r.ReadSlice('\n')
			if err != nil {
				return fail()
			}
			ok := bytes.HasPrefix(status, []byte("HTTP/1.1 200 "))
			length := -1
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return fail()
				}
				if len(line) <= 2 {
					break
				}
				if k, v, found := bytes.Cut(line, []byte(":")); found &&
					bytes.EqualFold(k, []byte("Content-Length")) {
					length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
				}
			}
			if length < 0 { // chunked or unknown: not what this client reads
				return fail()
			}
			if _, err := r.Discard(length); err != nil {
				return fail()
			}
			return ok
		}
	}
	span := time.Duration(*seconds * float64(time.Second))
	var n int
	if *rate > 0 {
		n = int(*rate * *seconds)
	}
	due := make([]int64, 0, n)
	done := make([]int64, 0, n)
	var mu sync.Mutex // closed loop: workers append their own records
	start := time.Now()
	var wg sync.WaitGroup
	if *rate > 0 {
		for i := 0; i < n; i++ {
			due = append(due, int64(float64(i)/(*rate)*1e6))
			done = append(done, -1)
		}
		jobs := make(chan job, n)
		for w := 0; w < *conns; w++ {
			wg.Add(1)
			get := newGet()
			go func() {
				defer wg.Done()
				for j := range jobs {
					if get() {
						atomic.StoreInt64(&done[j.i], int64(time.Since(start)/time.Microsecond))
					}
				}
			}()
		}
		// Release each request when it is due, in 1 ms steps (due times stay exact); SIGUSR1
		// ends the sending early (the requests due later are left out of the output).
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGUSR1)
		next := 0
	send:
		for next < n {
			select {
			case <-stop:
				span = time.Since(start)
				break send
			default:
			}
			now := time.Since(start)
			for next < n && time.Duration(due[next])*time.Microsecond <= now {
				jobs <- job{next, time.Duration(due[next]) * time.Microsecond}
				next++
			}
			time.Sleep(time.Millisecond)
		}
		close(jobs)
		mu.Lock()
		due = due[:next]
		mu.Unlock()
	} else {
		for w := 0; w < *conns; w++ {
			wg.Add(1)
			get := newGet()
			go func() {
				defer wg.Done()
				for {
					t := time.Since(start)
					if t >= span {
						return
					}
					ok := get()
					d := int64(-1)
					if ok {
						d = int64(time.Since(start) / time.Microsecond)
					}
					mu.Lock()
					due = append(due, int64(t/time.Microsecond))
					done = append(done, d)
					mu.Unlock()
				}
			}()
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	end := time.Until(start.Add(span))
	if end < 0 {
		end = 0
	}
	select {
	case <-finished:
	case <-time.After(end + *grace):
	}
	mu.Lock()
	defer mu.Unlock()
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	fmt.Fprintf(out, "start %d\n", start.UnixNano())
	for i := range due {
		d := atomic.LoadInt64(&done[i])
		if d >= 0 && d < due[i] {
			d = due[i]
		}
		fmt.Fprintf(out, "%d %d\n", due[i], d)
	}
	out.Flush()
	os.Exit(0)
}
