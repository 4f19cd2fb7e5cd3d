// Command prioritybench measures admission on real processes: router
// replicas (bin/router) in front of workersims (bin/workersim), all on
// 127.0.0.1, driven by closed-loop streaming clients. It prints Markdown
// sections for BENCHMARKS.md:
//
//   - priority: a bulk flood at about 5x one engine's capacity plus an
//     interactive stream at about 10% of it, against the interactive stream
//     alone, with classes off (a single FIFO, as before) and on;
//   - tenants: two tenants, one with 10x the other's clients, through a tier
//     of four replicas, spread at random or with the heavy one pinned to
//     one replica, with and without the tier-wide view;
//   - saturation: clients at 4x the engines' capacity, the saturation signal
//     off and on.
//
// Usage: go run ./scripts/prioritybench [-quick] priority|tenants|saturation...
// from the repository root, after make build.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"
)

var (
	quick  = flag.Bool("quick", false, "shorter runs")
	rounds = flag.Int("rounds", 3, "rounds of the priority runs, each round every run once, one after the other")
	runs   = flag.String("runs", "", "the priority runs to make, by name (alone, fifo, idle, lent, preempt), comma-separated; empty: all")
)

func main() {
	flag.Parse()
	for _, s := range flag.Args() {
		switch s {
		case "priority":
			priority()
		case "tenants":
			tenants()
		case "saturation":
			saturation()
		default:
			fmt.Fprintln(os.Stderr, "unknown scenario", s)
			os.Exit(2)
		}
	}
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

func newFleet() *fleet {
	dir, err := os.MkdirTemp("", "kvrouter-prioritybench-")
	if err != nil {
		panic(err)
	}
	return &fleet{dir: dir}
}

// window is how long a run warms up and then measures.
func window(warm, measure time.Duration) (time.Duration, time.Duration) {
	if *quick {
		return warm / 2, measure / 3
	}
	return warm, measure
}

// engineSampler reads the workers' running and waiting gauges, and the
// routers' queued requests, every 250 ms while measuring.
type engineSampler struct {
	running, waiting, queued []float64
	idleWhileQueued          int // samples with a free engine slot while requests waited at the router
}

func sampleEngines(f *fleet, slots int, from, to time.Time) *engineSampler {
	s := &engineSampler{}
	time.Sleep(time.Until(from))
	for time.Now().Before(to) {
		var run, wait, q float64
		for _, w := range f.workers {
			run += gauge(w, "vllm:num_requests_running")
			wait += gauge(w, "vllm:num_requests_waiting")
		}
		for _, r := range f.routers {
			q += gauge(r, "vllm_router_admission_queued")
		}
		s.running, s.waiting, s.queued = append(s.running, run), append(s.waiting, wait), append(s.queued, q)
		if q > 0 && run < float64(slots) {
			s.idleWhileQueued++
		}
		time.Sleep(250 * time.Millisecond)
	}
	return s
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func maxOf(xs []float64) float64 {
	var m float64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// drive runs clients until warm+measure, samples the engines while
// measuring, and returns the recorder, the measuring window and the samples.
func drive(f *fleet, slots int, clients []*client, warm, measure time.Duration) (*recorder, time.Time, time.Time, *engineSampler) {
	start := time.Now()
	from, to := start.Add(warm), start.Add(warm+measure)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(to) }()
	}
	es := sampleEngines(f, slots, from, to)
	wg.Wait()
	return clients[0].rec, from, to, es
}

func randomTarget(f *fleet, seed uint64) func() string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var mu sync.Mutex
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return f.routers[rng.IntN(len(f.routers))]
	}
}

func header(title, text string) {
	fmt.Printf("## %s\n\n%s\n\n", title, strings.TrimSpace(text))
}

var (
	stderr = os.Stderr
	loads  []string // the load average at the start of each run of a scenario
)
