package cluster

import (
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// WorkerStats is the answer of GET /cluster/workers: what this replica
// knows of every registered worker, for the status page (/ui) and for
// operators' scripts. Counters are cumulative since this replica first
// routed to the worker; a reader takes rates from two answers and At.
type WorkerStats struct {
	Node string `json:"node"`
	// At is when the figures were read, in Unix seconds.
	At      float64      `json:"at"`
	Workers []WorkerStat `json:"workers"`
}

// WorkerStat is one worker's row of GET /cluster/workers.
type WorkerStat struct {
	WorkerLoad
	Model string `json:"model,omitempty"`
	// PeerLoads is each other live replica's latest reported in-flight
	// count (non-zero ones): Load is LocalLoad plus their sum.
	PeerLoads map[string]int64 `json:"peer_loads"`
	// Probed: an active check has answered at least once.
	Probed bool `json:"probed"`
	// Circuit is "closed", "open" or "half_open".
	Circuit  string `json:"circuit"`
	Wedged   bool   `json:"wedged"`
	Degraded bool   `json:"degraded"`
	// RemoteVerdicts counts the replicas that hold a verdict against it.
	RemoteVerdicts int    `json:"remote_verdicts"`
	Hits           uint64 `json:"hits"`
	Misses         uint64 `json:"misses"`
	Tokens         uint64 `json:"tokens"`
	Processed      uint64 `json:"processed"`
	// KVEvents is the worker's KV-event stream, with --kv-events.
	KVEvents *KVEventsStat `json:"kv_events,omitempty"`
}

func (r *Replica) workerStats() WorkerStats {
	reg := r.fsm.View()
	tallies := r.proxy.WorkerTallies()
	peers := r.sync.PeerLoads()
	out := WorkerStats{Node: r.cfg.NodeName, At: float64(time.Now().UnixMicro()) / 1e6,
		Workers: make([]WorkerStat, 0, reg.Len())}
	for _, w := range reg.Workers() {
		out.Workers = append(out.Workers, r.workerStat(w, tallies[affinity.WorkerID(w.ID)], peers))
	}
	return out
}

func (r *Replica) workerStat(w store.Worker, t proxy.WorkerTally, peers map[string]map[uint32]int64) WorkerStat {
	l := r.loads.Get(affinity.WorkerID(w.ID))
	st, _ := r.monitor.Status(health.WorkerID(w.ID))
	s := WorkerStat{
		WorkerLoad: WorkerLoad{ID: w.ID, Worker: w.URL, URL: w.URL, Role: string(w.Role), Load: l.Merged(),
			LocalLoad: l.Local(), Healthy: st.Eligible, State: string(w.State)},
		Model: w.Model, PeerLoads: map[string]int64{}, Probed: st.Probed, Circuit: st.Circuit.String(),
		Wedged: st.Wedged, Degraded: st.Degraded, RemoteVerdicts: st.RemoteVerdicts,
		Hits: t.Hits, Misses: t.Misses, Tokens: t.Tokens, Processed: t.Processed,
		KVEvents: r.kvEventsStat(w.ID),
	}
	for origin, loads := range peers {
		if n := loads[uint32(w.ID)]; n != 0 {
			s.PeerLoads[origin] = n
		}
	}
	return s
}
