package cluster

import (
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

func (r *Replica) workerStats() adminapi.WorkerStats {
	reg := r.fsm.View()
	tallies := r.proxy.WorkerTallies()
	peers := r.sync.PeerLoads()
	out := adminapi.WorkerStats{Node: r.cfg.NodeName, At: float64(r.clock.Now().UnixMicro()) / 1e6,
		Workers: make([]adminapi.WorkerStat, 0, reg.Len())}
	for _, w := range reg.Workers() {
		out.Workers = append(out.Workers, r.workerStat(w, tallies[affinity.WorkerID(w.ID)], peers))
	}
	return out
}

func (r *Replica) workerStat(w store.Worker, t proxy.WorkerTally, peers map[string]map[uint32]int64) adminapi.WorkerStat {
	l := r.loads.Get(affinity.WorkerID(w.ID))
	st, _ := r.monitor.Status(health.WorkerID(w.ID))
	s := adminapi.WorkerStat{
		WorkerLoad: adminapi.WorkerLoad{ID: w.ID, Worker: w.URL, URL: w.URL, Role: string(w.Role), Load: l.Merged(),
			LocalLoad: l.Local(), Healthy: st.Eligible, State: string(w.State)},
		Model: w.Model, PeerLoads: map[string]int64{}, Probed: st.Probed, Circuit: st.Circuit.String(),
		Wedged: st.Wedged, Degraded: st.Degraded, RemoteVerdicts: st.RemoteVerdicts,
		Hits: t.Hits, Misses: t.Misses, Tokens: t.Tokens, Processed: t.Processed,
	}
	for origin, loads := range peers {
		if n := loads[uint32(w.ID)]; n != 0 {
			s.PeerLoads[origin] = n
		}
	}
	return s
}
