// churn: a busy but deterministic workload. It runs a fixed amount of work (-iters rounds),
// not a fixed time, through goroutines, channels, a contended mutex and GC, and prints
// "checksum <hex>" that depends only on -iters/-seed/-width, never on scheduling. Tests run
// it with and without gmpmon attached and compare the lines.
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"sync"

	"gmpmon/targets/internal/gate"
)

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

type tally struct {
	mu     sync.Mutex
	counts map[uint64]uint64
}

func (t *tally) add(k, v uint64) {
	t.mu.Lock()
	t.counts[k%97] += v
	t.mu.Unlock()
}

func round(seed int64, r, width int, t *tally) uint64 {
	in := make(chan uint64, 4)
	out := make(chan uint64, 4)
	var producers, stages sync.WaitGroup
	for i := 0; i < width; i++ {
		producers.Add(1)
		go func(i int) {
			defer producers.Done()
			rng := rand.New(rand.NewSource(seed ^ int64(r*1000003+i)))
			for j := 0; j < 50; j++ {
				in <- rng.Uint64()
			}
		}(i)
	}
	for s := 0; s < 2; s++ {
		stages.Add(1)
		go func() {
			defer stages.Done()
			for v := range in {
				buf := make([]byte, 64+int(v%512)) // garbage for the GC
				buf[0] = byte(v)
				w := mix(v) + uint64(buf[0])
				t.add(w, v)
				out <- w
			}
		}()
	}
	go func() { producers.Wait(); close(in) }()
	go func() { stages.Wait(); close(out) }()
	var sum uint64
	for w := range out {
		sum += w // addition commutes: the order the values arrive in does not matter
	}
	return sum
}

func main() {
	iters := flag.Int("iters", 400, "rounds of work")
	seed := flag.Int64("seed", 1, "seed")
	width := flag.Int("width", 8, "producer goroutines per round")
	flag.Parse()
	gate.Ready()
	t := &tally{counts: make(map[uint64]uint64)}
	var total uint64
	for r := 0; r < *iters; r++ {
		total = mix(total ^ round(*seed, r, *width, t))
		if r%50 == 49 {
			runtime.GC()
		}
	}
	keys := make([]uint64, 0, len(t.counts))
	for k := range t.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		total = mix(total ^ k ^ mix(t.counts[k]))
	}
	fmt.Printf("checksum %016x\n", total)
}
