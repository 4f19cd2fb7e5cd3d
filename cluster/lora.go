package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// LoRA is how the replica routes the requests of LoRA adapters.
type LoRA struct {
	// Residency sends an adapter's requests where it is resident (the
	// workers running it, by the tier's requests in flight and the
	// engines' vllm:lora_requests_info), a new adapter where a slot is
	// free, a hot one to more workers (--lora-residency, default on); off,
	// adapter requests are routed as any other.
	Residency bool
	// LoadPath is proxy.LoRAConfig.LoadPath (--lora-load-path, default
	// "": an adapter no worker lists is a 404).
	LoadPath string
}

// DefaultLoRA returns the defaults of the LoRA flags.
func DefaultLoRA() LoRA { return LoRA{Residency: true} }

// Validate refuses a load path that does not name the adapter.
func (l LoRA) Validate() error {
	if l.LoadPath != "" && !strings.Contains(l.LoadPath, proxy.AdapterNameVar) {
		return flagErr("lora-load-path", "must name the adapter with %s (got %q)", proxy.AdapterNameVar, l.LoadPath)
	}
	return nil
}

// proxyConfig is the proxy's side: with residency, every worker's models
// are asked at the engine scrape's pace, so that adapters loaded or
// unloaded at run time are routed within a scrape.
func (l LoRA) proxyConfig(h health.Config) proxy.LoRAConfig {
	c := proxy.LoRAConfig{LoadPath: l.LoadPath}
	if l.Residency {
		c.ModelRefresh = h.EngineScrapeInterval
		if c.ModelRefresh <= 0 {
			c.ModelRefresh = health.DefaultEngineScrapeInterval
		}
	}
	return c
}

// adapterReadings is how often the engines' latest readings are handed to
// the residency: the monitor reads each busy engine every scrape interval.
const adapterReadings = 250 * time.Millisecond

// loraResidency is the replica's side of the adapters' residency
// (--lora-residency): it feeds the core the engines' LoRA state and
// exposes the residency's metrics. nil when residency is off.
type loraResidency struct {
	core    *core.Replica
	engines *health.EngineScraper
	fsm     *store.FSM // the registry, whose workers the metrics name
	clock   clock.WithTicker
}

// newLoRAResidency is the residency's side of a replica, nil when
// --lora-residency is off.
func newLoRAResidency(on bool, c *core.Replica, engines *health.EngineScraper, fsm *store.FSM, clk clock.WithTicker) *loraResidency {
	if !on {
		return nil
	}
	return &loraResidency{core: c, engines: engines, fsm: fsm, clock: clk}
}

// feed hands the core every new reading of an engine's LoRA state, until
// ctx ends.
func (l *loraResidency) feed(ctx context.Context) {
	t := l.clock.NewTicker(adapterReadings)
	defer t.Stop()
	fed := map[health.WorkerID]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			for _, e := range l.engines.Readings(nil) {
				if e.LoRA == nil || !e.At.After(fed[e.ID]) {
					continue
				}
				fed[e.ID] = e.At
				l.core.ObserveAdapters(affinity.WorkerID(e.ID), core.EngineAdapters{At: e.At, Slots: e.LoRA.MaxLoRA,
					Running: e.LoRA.Running, Waiting: e.LoRA.Waiting})
			}
		}
	}
}

var _ = exposition.Describe(map[string]string{
	"vllm_router_lora_residency_bytes":       "Bytes the LoRA residency takes: the table of adapters per worker and the peers' latest reports of them (--lora-residency).",
	"vllm_router_lora_reports_refused_total": "Peers' reports of adapters left out: past the residency's byte bound, or from a peer past the 64 kept.",
	"vllm_router_worker_lora_busy_adapters":  "LoRA adapters holding a slot of each worker's engine now, by what the tier knows (the engine's latest reading, the tier's requests in flight), by worker URL.",
	"vllm_router_worker_lora_slots":          "Each worker's max_lora as the tier knows it from its engine's vllm:lora_requests_info (0: not read yet), by worker URL.",
})

// register registers the residency's metrics.
func (l *loraResidency) register(set *metrics.Set) {
	set.NewGauge("vllm_router_lora_residency_bytes", func() float64 { return float64(l.core.AdapterStats().Bytes) })
	set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteCounterUint64(w, "vllm_router_lora_reports_refused_total", l.core.AdapterStats().Refused)
		workers := l.fsm.View().Workers()
		for _, family := range []struct {
			name string
			of   func(affinity.WorkerID) int
		}{{"vllm_router_worker_lora_busy_adapters", l.core.BusyAdapters}, {"vllm_router_worker_lora_slots", l.core.AdapterSlots}} {
			metrics.WriteMetadataIfNeeded(w, family.name, "gauge") // once per family, not per series
			for _, wk := range workers {
				fmt.Fprintf(w, "%s{worker=%q} %d\n", family.name, wk.URL, family.of(affinity.WorkerID(wk.ID)))
			}
		}
	})
}
