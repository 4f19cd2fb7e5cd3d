package fleet

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// ttlSlack is what loadsync's default TTL allows beyond three missed
// reports; a longer interval keeps the same slack.
const ttlSlack = loadsync.DefaultLoadTTL - 3*loadsync.DefaultLoadInterval

// replica is one router replica: its counters, its ownership index, the
// routers bound to them, and, with SyncGossip, its gossip state.
type replica struct {
	name  string
	loads *affinity.LoadTable
	index *affinity.Index
	// heard is every ownership fact the replica's index ever recorded.
	heard heardSet
	// prefixAware says the main policy records ownership.
	prefixAware bool
	// own lists this replica's counters of every worker in id order, for
	// the load reports (LoadTable.Each has no stable order).
	own []*affinity.Load

	router     *affinity.Router // the main policy: prefill in a split fleet
	pool       *affinity.Pool
	decode     *affinity.Router // nil without a split
	decodePool *affinity.Pool

	gossip *loadsync.State // nil unless SyncGossip
}

// state is what a replica routes against: with SyncShared every replica
// gets the same one.
type state struct {
	loads *affinity.LoadTable
	index *affinity.Index
	heard heardSet
}

func newState(cfg Config, clock affinity.Clock) state {
	return state{loads: affinity.NewLoadTable(nil), index: affinity.NewIndex(clock, indexBudget(cfg)), heard: heardSet{}}
}

// indexBudget is a worker's KV capacity in router blocks: the index forgets
// about when the engine does.
func indexBudget(cfg Config) int {
	return max(cfg.Engine.KVCapacityTokens*cfg.Engine.BytesPerToken/cfg.BlockSize, 1)
}

// newReplica builds replica number n over st. rnd supplies its policies'
// random bits.
func newReplica(cfg Config, n int, st state, rnd *rand.Rand) (*replica, error) {
	r := &replica{name: fmt.Sprintf("replica-%d", n), loads: st.loads, index: st.index, heard: st.heard,
		prefixAware: cfg.Policy == affinity.PolicyCacheAware || cfg.Policy == affinity.PolicyFleetGate}
	for id := 1; id <= cfg.totalWorkers(); id++ {
		r.own = append(r.own, st.loads.Get(affinity.WorkerID(id)))
	}
	routed := cfg.routedWorkers()
	r.pool = affinity.NewPool(r.own[:routed])
	if cfg.Sync == SyncGossip {
		if err := r.startGossip(cfg, n); err != nil {
			return nil, err
		}
	}
	var err error
	if r.router, err = r.newRouter(cfg, cfg.Policy, rnd); err != nil {
		return nil, err
	}
	if cfg.Disaggregated() {
		r.decodePool = affinity.NewPool(r.own[routed:])
		r.decode, err = r.newRouter(cfg, cfg.DecodePolicy, rnd)
	}
	return r, err
}

func (r *replica) newRouter(cfg Config, policy string, rnd *rand.Rand) (*affinity.Router, error) {
	p, err := affinity.NewPolicy(cfg.settings(policy, rnd.Uint64), r.index)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	var sink affinity.OwnershipSink
	switch {
	case r.gossip != nil && cfg.NoDemotion:
		sink = plainSink{r.gossip}
	case r.gossip != nil:
		sink = ownershipSink{r.gossip}
	}
	return affinity.NewRouter(p, r.loads, r.index, cfg.BlockSize, sink), nil
}

// startGossip gives the replica a loadsync State wired to its counters and
// index, as a replica process wires it to memberlist.
func (r *replica) startGossip(cfg Config, n int) error {
	st, err := loadsync.New(loadsync.Config{
		Origin:       r.name,
		BootEpoch:    uint64(n + 1),
		LoadInterval: cfg.GossipInterval,
		LoadTTL:      3*cfg.GossipInterval + ttlSlack,
		LocalLoads:   r.localLoads,
		OnRemoteLoad: func(w uint32, n int64) { r.loads.SetRemote(affinity.WorkerID(w), n) },
		OnOwnership:  r.learn,
	})
	if err != nil {
		return fmt.Errorf("%w: gossip: %w", ErrBadConfig, err)
	}
	r.gossip = st
	return nil
}

// learn records an ownership fact heard from a peer in the index, charged
// the span of prefix it stands for.
func (r *replica) learn(f loadsync.Fact) {
	r.index.Learn(affinity.Fact{Hash: f.Hash, Worker: affinity.WorkerID(f.Worker), Span: f.Span})
	r.heard.add(f.Hash, affinity.WorkerID(f.Worker))
}

// recordHeard notes the replica's own decision: w owns every block of hashes.
func (r *replica) recordHeard(hashes []uint64, w affinity.WorkerID) {
	if !r.prefixAware {
		return
	}
	for _, h := range hashes {
		r.heard.add(h, w)
	}
}

// localLoads reports this replica's own in-flight counts.
func (r *replica) localLoads(dst []loadsync.WorkerLoad) []loadsync.WorkerLoad {
	for _, l := range r.own {
		if n := l.Local(); n != 0 {
			dst = append(dst, loadsync.WorkerLoad{Worker: uint32(l.ID()), InFlight: n})
		}
	}
	return dst
}

// plainSink announces decisions without what a hit matched before.
type plainSink struct{ st *loadsync.State }

func (s plainSink) Owned(hashes []uint64, w affinity.WorkerID) { s.st.Owned(hashes, uint32(w)) }

// ownershipSink hands the router's ownership decisions to the gossip.
type ownershipSink struct{ st *loadsync.State }

func (s ownershipSink) Owned(hashes []uint64, w affinity.WorkerID) { s.st.Owned(hashes, uint32(w)) }

func (s ownershipSink) OwnedBeyond(hashes []uint64, known int, w affinity.WorkerID) {
	s.st.OwnedBeyond(hashes, known, uint32(w))
}
