package cluster

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/store"
)

// syncMetrics registers the series of new workers and drops those of
// workers gone.
func (h *kvHub) syncMetrics(set *metrics.Set, workers []store.Worker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := map[store.WorkerID]bool{}
	for _, w := range workers {
		keep[w.ID] = true
		if _, ok := h.names[w.ID]; ok {
			continue
		}
		h.names[w.ID] = h.registerWorker(set, w)
	}
	for id, names := range h.names {
		if !keep[id] {
			for _, name := range names {
				set.UnregisterMetric(name)
			}
			delete(h.names, id)
		}
	}
}

func (h *kvHub) registerWorker(set *metrics.Set, w store.Worker) []string {
	id := uint32(w.ID)
	status := func() kvevents.WorkerStatus { s, _ := h.hub.Status(id); return s }
	var names []string
	gauge := func(name string, f func() float64) {
		set.GetOrCreateGauge(name, f)
		names = append(names, name)
	}
	for _, t := range kvevents.Trusts {
		gauge(fmt.Sprintf(`vllm_router_kv_events_stream{worker=%q,state=%q}`, w.URL, t),
			func() float64 { return boolGauge(status().Trust == t) })
	}
	for _, src := range []string{"dial", "bind", "peer"} {
		gauge(fmt.Sprintf(`vllm_router_kv_events_source{worker=%q,source=%q}`, w.URL, src),
			func() float64 { return boolGauge(status().Source == src) })
	}
	gauge(fmt.Sprintf(`vllm_router_kv_events_blocks{worker=%q}`, w.URL), func() float64 { return float64(status().Blocks) })
	gauge(fmt.Sprintf(`vllm_router_kv_events_set_bytes{worker=%q}`, w.URL), func() float64 { return float64(status().Bytes) })
	for cause, f := range map[string]func(kvevents.Stats) uint64{
		"lost": func(s kvevents.Stats) uint64 { return s.Lost }, "rewind": func(s kvevents.Stats) uint64 { return s.Rewinds },
		"malformed": func(s kvevents.Stats) uint64 { return s.Malformed },
		"peer":      func(s kvevents.Stats) uint64 { return s.PeerResets },
		"topic":     func(s kvevents.Stats) uint64 { return s.TopicChanges },
	} {
		gauge(fmt.Sprintf(`vllm_router_kv_events_resets{worker=%q,cause=%q}`, w.URL, cause),
			func() float64 { return float64(f(status().Stats)) })
	}
	gauge(fmt.Sprintf(`vllm_router_kv_events_batches{worker=%q}`, w.URL), func() float64 { return float64(status().Stats.Batches) })
	gauge(fmt.Sprintf(`vllm_router_kv_events_violations{worker=%q}`, w.URL), func() float64 {
		s := status()
		return float64(s.Violations + s.Stats.Unparsable)
	})
	return names
}

// registerKVMetrics registers the replica-wide families of the mode, read
// from the core routing returns (nil until it is built).
func registerKVMetrics(set *metrics.Set, routing func() *core.Replica) {
	for on, f := range map[string]func(core.KVRouting) uint64{
		"events":   func(k core.KVRouting) uint64 { return k.OnEvents },
		"text":     func(k core.KVRouting) uint64 { return k.OnText },
		"reserved": func(k core.KVRouting) uint64 { return k.Reserved },
	} {
		set.GetOrCreateGauge(fmt.Sprintf(`vllm_router_kv_matched_candidates{on=%q}`, on), func() float64 {
			c := routing()
			if c == nil {
				return 0
			}
			return float64(f(c.KVRouting()))
		})
	}
	set.GetOrCreateGauge("vllm_router_kv_routed_requests", func() float64 {
		c := routing()
		if c == nil {
			return 0
		}
		return float64(c.KVRouting().Requests)
	})
}

// registerKVTierMetrics registers the families of the bound socket and the
// relay between replicas.
func registerKVTierMetrics(set *metrics.Set, hub *kvevents.Hub) {
	for cause, f := range map[string]func(kvevents.BindStats) uint64{
		"not_a_worker": func(s kvevents.BindStats) uint64 { return s.NotAWorker },
		"protocol":     func(s kvevents.BindStats) uint64 { return s.Protocol },
		"crowded":      func(s kvevents.BindStats) uint64 { return s.Crowded },
		"unknown":      func(s kvevents.BindStats) uint64 { return s.Unknown },
		"ambiguous":    func(s kvevents.BindStats) uint64 { return s.Ambiguous },
		"elsewhere":    func(s kvevents.BindStats) uint64 { return s.Elsewhere },
		"claimed":      func(s kvevents.BindStats) uint64 { return s.Claimed },
		"unparsable":   func(s kvevents.BindStats) uint64 { return s.Unparsable },
	} {
		set.GetOrCreateGauge(fmt.Sprintf(`vllm_router_kv_events_bind_refused{cause=%q}`, cause),
			func() float64 { return float64(f(hub.BindStats())) })
	}
	for what, f := range map[string]func(kvevents.RelayStats) uint64{
		"dropped": func(s kvevents.RelayStats) uint64 { return s.Dropped }, "received": func(s kvevents.RelayStats) uint64 { return s.Received },
		"unknown":   func(s kvevents.RelayStats) uint64 { return s.Unknown },
		"malformed": func(s kvevents.RelayStats) uint64 { return s.Malformed },
		"fetched":   func(s kvevents.RelayStats) uint64 { return s.Fetched },
		"restored":  func(s kvevents.RelayStats) uint64 { return s.Restored },
	} {
		set.GetOrCreateGauge(fmt.Sprintf(`vllm_router_kv_events_relay{what=%q}`, what),
			func() float64 { return float64(f(hub.RelayStats())) })
	}
}
