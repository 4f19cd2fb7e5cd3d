package cluster

import (
	"runtime/metrics"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// The Go runtime's own size, under the names Prometheus' Go collector
// gives them, read from runtime/metrics (no stop of the world): what a soak
// watches for growth beside the process's RSS and open files.
var runtimeSamples = []string{
	"/sched/goroutines:goroutines",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
}

// runtimeReader reads the samples at most once per scrape (the three
// gauges of one scrape share one read).
type runtimeReader struct {
	mu      sync.Mutex
	at      time.Time
	samples []metrics.Sample
}

func (r *runtimeReader) value(i int) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == nil || time.Since(r.at) > 100*time.Millisecond {
		if r.samples == nil {
			r.samples = make([]metrics.Sample, len(runtimeSamples))
			for j, name := range runtimeSamples {
				r.samples[j].Name = name
			}
		}
		metrics.Read(r.samples)
		r.at = time.Now()
	}
	if r.samples[i].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(r.samples[i].Value.Uint64())
}

// registerRuntime exports go_goroutines, go_memstats_heap_alloc_bytes and
// go_memstats_sys_bytes.
func registerRuntime(set *vm.Set) {
	r := new(runtimeReader)
	set.NewGauge("go_goroutines", func() float64 { return r.value(0) })
	set.NewGauge("go_memstats_heap_alloc_bytes", func() float64 { return r.value(1) })
	set.NewGauge("go_memstats_sys_bytes", func() float64 { return r.value(2) })
}
