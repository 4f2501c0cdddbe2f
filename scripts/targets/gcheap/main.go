// gcheap: a workload whose GC and heap gmpmon's GC panel is checked against, with the
// runtime's own runtime/metrics (and runtime.MemStats) read inside the same process.
//
// It keeps a live set of -live MiB, prints "ready", then obeys one command per stdin line:
//
//	metrics    print "metrics {json}": the GC metrics this Go version has, read now
//	churn S    allocate garbage for S seconds (many GC cycles; the live set stays), end
//	           with runtime.GC (the last cycle ends, one more runs, all is swept), then
//	           print "churned N" (N: bytes allocated); nothing allocates after it
//	quit       exit
//
// Between commands nothing allocates, so no cycle starts: a reader that takes its baseline
// before "churn" and its last read after it sees the same cycles as the metrics.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

var names = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/cpu/classes/gc/mark/dedicated:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/cpu/classes/gc/pause:cpu-seconds",
	"/sched/goroutines:goroutines",
	"/sched/gomaxprocs:threads",
}

var live [][]byte

func read() map[string]interface{} {
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
	out := map[string]interface{}{}
	for _, x := range s {
		switch x.Value.Kind() {
		case metrics.KindUint64:
			out[x.Name] = x.Value.Uint64()
		case metrics.KindFloat64:
			out[x.Name] = x.Value.Float64()
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms) // a STW of its own; after the metrics, so it does not move them
	out["MemStats.NumGC"] = ms.NumGC
	out["MemStats.PauseTotalNs"] = ms.PauseTotalNs
	out["MemStats.NextGC"] = ms.NextGC
	return out
}

var sink []byte

func churn(d time.Duration) int {
	n := 0
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for i := 0; i < 256; i++ {
			sink = make([]byte, 4096)
			n += len(sink)
		}
	}
	sink = nil
	// A cycle the last allocation started may still be marking in the background, and on a
	// loaded 2-CPU host it once outlived a 300 ms sleep: a read on each side of its end
	// differs (Go 1.19: the goal moved from triggered+runway to the GOGC goal between
	// metrics.Read and ReadMemStats). runtime.GC waits for that cycle, runs one more and
	// sweeps, so that "churned" means quiet: nothing marks or sweeps until the next churn.
	runtime.GC()
	return n
}

func main() {
	liveMiB := flag.Int("live", 16, "MiB kept live")
	flag.Parse()
	for i := 0; i < *liveMiB*16; i++ {
		live = append(live, make([]byte, 64<<10))
	}
	runtime.GC()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "metrics":
			b, _ := json.Marshal(read())
			fmt.Printf("metrics %s\n", b)
		case "churn":
			s, _ := strconv.ParseFloat(f[1], 64)
			fmt.Printf("churned %d\n", churn(time.Duration(s*float64(time.Second))))
		case "quit":
			runtime.KeepAlive(live)
			return
		}
	}
	runtime.KeepAlive(live)
}
