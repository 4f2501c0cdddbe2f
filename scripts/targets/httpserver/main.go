// httpserver: a net/http server on -addr (loopback only). Prints "listening <addr>", then
// "ready", and serves until killed. GET / answers "ok"; GET /work?us=N burns N µs first.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"gmpmon/targets/internal/gate"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		us, _ := strconv.Atoi(r.URL.Query().Get("us"))
		gate.Burn(time.Duration(us) * time.Microsecond)
		_, _ = io.WriteString(w, "ok\n")
	})
	fmt.Println("listening", ln.Addr().String())
	gate.Ready()
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}
