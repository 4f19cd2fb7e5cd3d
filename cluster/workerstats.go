package cluster

import (
	"context"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// adminViews are the replica's answers to the admin API's reads
// (/get_loads, /cluster/status, /cluster/workers, /cluster/history), built
// from the parts they read. The fields are set once the parts are built;
// proxy just after the admin API it serves.
type adminViews struct {
	ctx     context.Context
	node    string
	raft    *raftnode.Node
	fsm     *store.FSM
	gossip  func() *loadsync.Gossip
	members *membership.Membership
	sync    *loadsync.State
	loads   *affinity.LoadTable
	monitor *health.Monitor
	proxy   *proxy.Proxy
	clock   clock.WithTicker
	history *sampleRing
	kv      *kvHub // nil unless --kv-events
}

func (v *adminViews) workerStats() adminapi.WorkerStats {
	reg := v.fsm.View()
	tallies := v.proxy.WorkerTallies()
	peers := v.sync.PeerLoads()
	out := adminapi.WorkerStats{Node: v.node, At: float64(v.clock.Now().UnixMicro()) / 1e6,
		Workers: make([]adminapi.WorkerStat, 0, reg.Len())}
	for _, w := range reg.Workers() {
		out.Workers = append(out.Workers, v.workerStat(w, tallies[affinity.WorkerID(w.ID)], peers))
	}
	return out
}

func (v *adminViews) workerStat(w store.Worker, t proxy.WorkerTally, peers map[string]map[uint32]int64) adminapi.WorkerStat {
	st, _ := v.monitor.Status(health.WorkerID(w.ID))
	s := adminapi.WorkerStat{
		WorkerLoad: v.workerLoad(w, st),
		Model:      w.Model, PeerLoads: map[string]int64{}, Probed: st.Probed, Circuit: st.Circuit.String(),
		Wedged: st.Wedged, Degraded: st.Degraded, RemoteVerdicts: st.RemoteVerdicts,
		Hits: t.Hits, Misses: t.Misses, Tokens: t.Tokens, Processed: t.Processed,
		KVEvents: v.kv.stat(w.ID),
	}
	for origin, loads := range peers {
		if n := loads[uint32(w.ID)]; n != 0 {
			s.PeerLoads[origin] = n
		}
	}
	return s
}

// workerLoads is the /get_loads view: merged and local in-flight counts with
// health and drain state.
func (v *adminViews) workerLoads() []adminapi.WorkerLoad {
	reg := v.fsm.View()
	out := make([]adminapi.WorkerLoad, 0, reg.Len())
	for _, w := range reg.Workers() {
		st, _ := v.monitor.Status(health.WorkerID(w.ID))
		out = append(out, v.workerLoad(w, st))
	}
	return out
}

// workerLoad is w's row of /get_loads, with st its health here.
func (v *adminViews) workerLoad(w store.Worker, st health.WorkerStatus) adminapi.WorkerLoad {
	l := v.loads.Get(affinity.WorkerID(w.ID))
	return adminapi.WorkerLoad{ID: w.ID, Worker: w.URL, URL: w.URL, Role: string(w.Role), Load: l.Merged(),
		LocalLoad: l.Local(), PrefillBacklog: l.MergedBacklog(), LocalPrefillBacklog: l.Backlog(),
		Healthy: st.Eligible, State: string(w.State)}
}
