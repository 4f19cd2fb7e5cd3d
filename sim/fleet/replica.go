package fleet

import (
	"fmt"
	"math/rand/v2"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
)

// ttlSlack is what loadsync's default TTL allows beyond three missed
// reports; a longer interval keeps the same slack.
const ttlSlack = loadsync.DefaultLoadTTL - 3*loadsync.DefaultLoadInterval

// replica is one router replica: the product's replica core
// (core), driven on virtual time, and the routers bound to it.
type replica struct {
	name string
	core *core.Replica
	// placement is its side of the placer's protocol, nil without
	// Config.Placer.
	placement *core.Placement
	// loads and index are the core's; gossip is its side of the gossip,
	// nil unless SyncGossip.
	loads  *affinity.LoadTable
	index  *affinity.Index
	gossip *loadsync.State
	// heard is every ownership fact the replica's index ever recorded.
	heard heardSet
	// own lists this replica's counters of every worker in id order.
	own []*affinity.Load

	// door is the replica's admission door, nil without Config.Door;
	// readings holds its latest reading of each worker's engine (by
	// index), queued the requests waiting at it, and doorMoved says a
	// peer's queue report reached it since it was last looked at.
	door      *core.Door
	readings  []admission.Reading
	queued    []*request
	doorMoved bool

	router     *affinity.Router // the main policy: prefill in a split fleet
	pool       *affinity.Pool
	decode     *affinity.Router // nil without a split
	decodePool *affinity.Pool
}

// state is what a replica routes against: with SyncShared every replica
// gets the same one.
type state struct {
	loads *affinity.LoadTable
	index *affinity.Index
	heard heardSet
}

func newState(cfg Config, clk clock.PassiveClock) state {
	return state{loads: affinity.NewLoadTable(nil), index: affinity.NewIndex(clk, indexBudget(cfg)), heard: heardSet{}}
}

// indexBudget is a worker's KV capacity in router blocks: the index forgets
// about when the engine does.
func indexBudget(cfg Config) int {
	return max(cfg.Engine.KVCapacityTokens*cfg.Engine.BytesPerToken/cfg.BlockSize, 1)
}

// newReplica builds replica number n over st, on clk. rnd supplies its
// policies' random bits.
func newReplica(cfg Config, n int, st state, clk clock.PassiveClock, rnd *rand.Rand) (*replica, error) {
	r := &replica{name: replicaName(n), heard: st.heard, readings: make([]admission.Reading, cfg.totalWorkers())}
	var err error
	if r.door, err = newDoor(cfg, clk, st.loads, r.latestReadings); err != nil {
		return nil, err
	}
	c, err := core.New(core.Config{Clock: clk, BlockSize: cfg.BlockSize, IndexBudget: indexBudget(cfg),
		Thresholds: cfg.Thresholds, Gossip: r.gossipConfig(cfg, n), NoPeerShare: cfg.NoPeerShare,
		NoDemotion: cfg.NoDemotion, NoCalibration: cfg.NoCalibration,
		NoCalibrationGossip: cfg.NoCalibrationGossip, Heard: r.recordHeard, Loads: st.loads,
		Index: st.index})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	r.core, r.loads, r.index, r.gossip = c, c.Loads(), c.Index(), c.Gossip()
	if r.placement, err = newPlacement(cfg, n, c); err != nil {
		return nil, err
	}
	ids := make([]affinity.WorkerID, 0, cfg.totalWorkers())
	for id := 1; id <= cfg.totalWorkers(); id++ {
		ids = append(ids, affinity.WorkerID(id))
		r.own = append(r.own, r.loads.Get(affinity.WorkerID(id)))
	}
	c.SetRegistry(ids)
	if cfg.Sync == SyncGossip {
		c.SetPeers(cfg.Replicas-1, r.gossip.Config().ReportLag())
	}
	routed := cfg.routedWorkers()
	r.pool = affinity.NewPool(r.own[:routed])
	if r.router, err = r.newRouter(cfg, cfg.Policy, rnd); err != nil {
		return nil, err
	}
	if cfg.Disaggregated() {
		r.decodePool = affinity.NewPool(r.own[routed:])
		r.decode, err = r.newRouter(cfg, cfg.DecodePolicy, rnd)
	}
	return r, err
}

// replicaName is replica n's name: its gossip origin, and what a question
// to it as the placer is put to.
func replicaName(n int) string { return fmt.Sprintf("replica-%d", n) }

// gossipConfig is the replica's side of the gossip with SyncGossip, nil
// otherwise: the product's State with the fleet's report interval, and
// with a door its queue reports, as the router's.
func (r *replica) gossipConfig(cfg Config, n int) *loadsync.Config {
	if cfg.Sync != SyncGossip {
		return nil
	}
	lc := &loadsync.Config{Origin: r.name, BootEpoch: uint64(n + 1), LoadInterval: cfg.GossipInterval,
		LoadFlushInterval: cfg.GossipFlushInterval, LoadTTL: 3*cfg.GossipInterval + ttlSlack}
	if r.door != nil {
		lc.LocalQueues = r.door.LocalQueues
		lc.OnQueues = func(origin string, ds []loadsync.QueueDepth) {
			r.door.RemoteQueues(origin, ds)
			r.doorMoved = true
		}
	}
	return lc
}

func (r *replica) newRouter(cfg Config, policy string, rnd *rand.Rand) (*affinity.Router, error) {
	rt, err := r.core.NewRouter(cfg.settings(policy, rnd.Uint64))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return rt, nil
}

// recordHeard notes a fact the replica's index recorded: w owns every
// block of hashes.
func (r *replica) recordHeard(hashes []uint64, w affinity.WorkerID) {
	for _, h := range hashes {
		r.heard.add(h, w)
	}
}

// latestReadings appends the replica's latest reading of every engine it
// has read: what its door reads (core.DoorConfig.Readings).
func (r *replica) latestReadings(dst []admission.Reading) []admission.Reading {
	for _, rd := range r.readings {
		if !rd.At.IsZero() {
			dst = append(dst, rd)
		}
	}
	return dst
}
