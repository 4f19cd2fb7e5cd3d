package core

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// ErrConfig marks a Config the core cannot be built from.
var ErrConfig = errors.New("core: invalid config")

// Config configures a Replica. Zero fields take the defaults in their
// comments; callbacks may be nil.
type Config struct {
	// Clock stamps index facts and drives the peer share: clock.RealClock{}
	// in the router, virtual time in the simulator. Required.
	Clock clock.PassiveClock
	// BlockSize is the hash block in bytes of routing text. Required.
	BlockSize int
	// IndexBudget is every worker's index budget in blocks until its
	// engine's capacity is known (affinity.NewIndex). Default 1.
	IndexBudget int
	// Thresholds are the cache-aware thresholds an engine's answer is
	// judged by: an answer whose cached share of the prompt exceeds
	// CacheThreshold is a hit (affinity.Thresholds.Hit). All zero means
	// affinity.DefaultThresholds.
	Thresholds affinity.Thresholds
	// PrefixTTL, when positive, makes Expire forget facts idle longer.
	PrefixTTL time.Duration
	// OnUnderflow hears an in-flight count that would have gone below
	// zero (affinity.NewLoadTable).
	OnUnderflow func(affinity.WorkerID)

	// Gossip, when set, gives the replica its side of the load, ownership
	// and verdict gossip; its callbacks (LocalLoads, OnRemoteLoad,
	// KnownWorker, OnOwnership, and the verdicts through LocalVerdicts and
	// OnVerdicts below) are the core's and are overwritten. Nil for a
	// replica alone that gossips nothing.
	Gossip *loadsync.Config
	// LocalVerdicts appends this replica's verdicts against workers.
	LocalVerdicts func(dst []loadsync.Verdict) []loadsync.Verdict
	// OnVerdicts hears a peer's verdicts about known workers (nil: the peer
	// withdrew them all).
	OnVerdicts func(origin string, vs []loadsync.Verdict)
	// NoPeerShare turns off the peers' expected share of a burst
	// (affinity.LoadTable.SetPeerShare): SetPeers then changes nothing.
	NoPeerShare bool
	// NoDemotion announces decisions without what a hit matched before
	// (loadsync.State.Owned rather than OwnedBeyond). For comparisons.
	NoDemotion bool

	// NoCalibration keeps the index's budgets as set: the engines' answers
	// to predicted hits do not calibrate them (affinity.Index.Calibrate).
	// For comparisons.
	NoCalibration bool
	// NoCalibrationGossip keeps each replica's calibration its own: the
	// judgements of its predicted hits are not sent to the peers, nor
	// theirs applied here (loadsync.State.Judged). For comparisons.
	NoCalibrationGossip bool

	// Heard, when set, observes every fact this replica records, its own
	// decisions' and its peers', after the trust boundary. For measurement.
	Heard func(hashes []uint64, w affinity.WorkerID)

	// KV, when set, matches requests that carry their tokens on the
	// engines' KV events (kvmatch.go); nil routes on the text index alone.
	KV KVSource
	// KVReservation is how long a decision's blocks count as the worker's
	// while its engine's events may not show them yet (default
	// DefaultReservation).
	KVReservation time.Duration

	// LoRA, when set, makes the routers place a LoRA adapter's requests
	// where the adapter is resident (affinity.Adapters), from this
	// replica's own requests, the engines' readings (ObserveAdapters) and
	// the peers' reports (AdapterChannel).
	LoRA bool
	// LoRABytes bounds the residency's table and the peers' records, each
	// (default affinity.DefaultAdaptersBytes).
	LoRABytes int64

	// Loads and Index, when set, are used instead of new ones: replicas
	// that share one state (the simulator's upper bound). Nil in the
	// product.
	Loads *affinity.LoadTable
	Index *affinity.Index
}

// Replica is one replica's routing state. See the package doc.
type Replica struct {
	cfg   Config
	loads *affinity.LoadTable
	index *affinity.Index
	sync  *loadsync.State // nil without Config.Gossip
	// adapters is the LoRA residency table, lora its gossip; both nil
	// without Config.LoRA (adapters.go).
	adapters *affinity.Adapters
	lora     *loraState

	// reg is the registry's workers, in id order, with their load
	// entries: what peers may speak of, and what load reports list.
	reg registry
	// gate is where what the peers gossip comes in (peers.go).
	gate *peerGate

	// thresholds judge the engines' answers: Config.Thresholds until
	// SetThresholds.
	thresholds atomic.Pointer[affinity.Thresholds]
	decide     *decider
	judge      *judge
	events     *events

	questions questions // this replica's questions to the placer
	holds     holds     // the placer's reservations for its peers' questions
	// origin is this replica's gossip name (what its questions are asked
	// as), and holdBound the longest the placer holds a peer's question
	// (Placement.Serve): a regular report's interval and three flush lags,
	// the answer's way back and the report's way here on a loaded host,
	// for a report that never says it was counted (a lost packet, an asker
	// gone); both set with the gossip.
	origin    string
	holdBound time.Duration
}

// New builds a Replica from cfg.
func New(cfg Config) (*Replica, error) {
	if cfg.Clock == nil || cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: a clock and a block size > 0 are required", ErrConfig)
	}
	if cfg.Thresholds == (affinity.Thresholds{}) {
		cfg.Thresholds = affinity.DefaultThresholds()
	}
	r := &Replica{cfg: cfg, loads: cfg.Loads, index: cfg.Index}
	r.SetThresholds(cfg.Thresholds)
	if r.loads == nil {
		r.loads = affinity.NewLoadTable(cfg.OnUnderflow)
	}
	if r.index == nil {
		r.index = affinity.NewIndex(cfg.Clock, cfg.IndexBudget)
	}
	r.reg.workers.Store(&knownWorkers{byID: map[affinity.WorkerID]*affinity.Load{}})
	r.gate = &peerGate{reg: &r.reg, index: r.index, heard: cfg.Heard, onVerdicts: cfg.OnVerdicts}
	r.events = newEvents(cfg, r.index)
	r.decide = &decider{reg: &r.reg, loads: r.loads, index: r.index, thresholds: &r.thresholds,
		blockSize: cfg.BlockSize, events: r.events, clock: cfg.Clock}
	r.judge = &judge{thresholds: &r.thresholds, reg: &r.reg, index: r.index, blockSize: cfg.BlockSize, kv: cfg.KV,
		noCalibration: cfg.NoCalibration}
	if cfg.Gossip != nil {
		if err := r.startGossip(*cfg.Gossip); err != nil {
			return nil, err
		}
	}
	if cfg.LoRA {
		r.startLoRA()
	}
	return r, nil
}

// startLoRA makes the residency table and its side of the gossip.
func (r *Replica) startLoRA() {
	bound := r.cfg.LoRABytes
	if bound <= 0 {
		bound = affinity.DefaultAdaptersBytes
	}
	maxPkt := loadsync.DefaultMaxPacketBytes
	if r.sync != nil {
		maxPkt = r.sync.Config().MaxPacketBytes
	}
	r.adapters = affinity.NewAdapters(r.cfg.Clock, bound)
	r.lora = &loraState{table: r.adapters, origin: r.origin, maxBytes: bound, maxPkt: maxPkt, known: r.reg.isKnown,
		engine: map[affinity.WorkerID]engineReading{}, peers: map[string]*adapterPeer{}, sent: map[affinity.WorkerID]sentRecord{}}
}

func (r *Replica) startGossip(gc loadsync.Config) error {
	g := r.gate
	gc.LocalLoads = g.localLoads
	gc.OnRemoteLoad = g.remoteLoad
	gc.LocalBacklogs = g.localBacklogs
	gc.OnRemoteBacklog = g.remoteBacklog
	gc.KnownWorker = r.reg.isKnown
	gc.OnOwnership = g.ownership
	gc.LocalVerdicts = r.cfg.LocalVerdicts
	gc.OnVerdicts = g.remoteVerdicts
	gc.CountedAnswers = r.questions.counted
	gc.OnCounted = r.holds.counted
	gc.OnCalibration = nil
	if !r.cfg.NoCalibration && !r.cfg.NoCalibrationGossip {
		gc.OnCalibration = g.remoteCalibration
	}
	st, err := loadsync.New(gc)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	r.sync = st
	if !r.cfg.NoCalibrationGossip {
		r.judge.judged = st.Judged
	}
	c := st.Config()
	r.origin, r.holdBound = c.Origin, c.LoadInterval+3*c.ReportLag()
	return nil
}

// SetThresholds makes th the thresholds the engines' answers are judged by
// (a routing change the cluster replicated).
func (r *Replica) SetThresholds(th affinity.Thresholds) {
	if th == (affinity.Thresholds{}) {
		th = affinity.DefaultThresholds()
	}
	r.thresholds.Store(&th)
}

// Loads is the replica's load table.
func (r *Replica) Loads() *affinity.LoadTable { return r.loads }

// Index is the replica's ownership index.
func (r *Replica) Index() *affinity.Index { return r.index }

// Gossip is the replica's side of the gossip, nil without Config.Gossip. A
// memberlist node pumps it in the product (loadsync.Start); Tick and
// Receive are the same calls for a driver that carries packets itself.
func (r *Replica) Gossip() *loadsync.State { return r.sync }

// NewRouter binds a policy of settings (its block size is the core's) to
// the replica's load table and index, announcing its decisions to the
// peers when the replica gossips.
func (r *Replica) NewRouter(s affinity.Settings) (*affinity.Router, error) {
	s.BlockSize = r.cfg.BlockSize
	p, err := affinity.NewPolicy(s, r.index)
	if err != nil {
		return nil, err
	}
	router := affinity.NewRouter(p, r.loads, r.index, r.cfg.BlockSize, r.sink())
	if r.adapters != nil {
		th := s.Thresholds
		if th == (affinity.Thresholds{}) {
			th = affinity.DefaultThresholds()
		}
		router.PlaceAdapters(r.adapters, th)
	}
	return router, nil
}

// sink is where the routers announce their ownership decisions.
func (r *Replica) sink() affinity.OwnershipSink {
	var s affinity.OwnershipSink
	switch {
	case r.sync != nil && r.cfg.NoDemotion:
		s = plainSink{r.sync}
	case r.sync != nil:
		s = extendingSink{r.sync}
	}
	if r.cfg.Heard == nil {
		return s
	}
	return heardSink{next: s, heard: r.cfg.Heard}
}

// SetRegistry makes ids the registry's workers: the only ones peers may
// speak of. A worker new to this replica gets its load entry now; the
// peers' counts for it arrive with their next full reports (what they sent
// before the registry named it was dropped at the gossip's door). A worker
// that left loses its entry.
func (r *Replica) SetRegistry(ids []affinity.WorkerID) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	k := &knownWorkers{byID: make(map[affinity.WorkerID]*affinity.Load, len(ids))}
	for _, id := range ids {
		l := r.loads.Get(id)
		k.byID[id] = l
		k.inOrder = append(k.inOrder, l)
	}
	k.pool = affinity.NewPool(k.inOrder)
	old := r.reg.workers.Swap(k)
	for id := range old.byID {
		if _, ok := k.byID[id]; !ok {
			r.loads.Remove(id)
			if r.lora != nil {
				r.lora.forget(id)
			}
		}
	}
}

// HealthChanged forgets the prefixes of workers that failed their health
// checks: an engine that went away lost its cache, so its old prefixes must
// be misses when it comes back. A worker not probed yet is not down: it
// keeps what peers taught us about it.
func (r *Replica) HealthChanged(down []affinity.WorkerID) {
	for _, w := range down {
		r.index.Forget(w)
	}
}

// SetPeers tells the replica how many live peers it has, so that selection
// counts their expected share of a burst, their reports being interval
// apart (affinity.LoadTable.SetPeerShare).
func (r *Replica) SetPeers(peers int, interval time.Duration) {
	if r.cfg.NoPeerShare {
		return
	}
	r.loads.SetPeerShare(peers, interval, r.cfg.Clock)
}

// Tick runs the gossip at now and returns the packets to send to every
// peer (none without gossip).
func (r *Replica) Tick(now time.Time) [][]byte {
	if r.sync == nil {
		return nil
	}
	return r.sync.Tick(now)
}

// NextTick is when Tick has something to do next; the zero time without
// gossip.
func (r *Replica) NextTick() time.Time {
	if r.sync == nil {
		return time.Time{}
	}
	return r.sync.NextTick()
}

// Receive merges a gossip packet that arrived at now.
func (r *Replica) Receive(packet []byte, now time.Time) error {
	if r.sync == nil {
		return errors.New("core: a packet for a replica that does not gossip")
	}
	return r.sync.Receive(packet, now)
}

// Expire forgets ownership facts idle longer than Config.PrefixTTL at now;
// it does nothing without one.
func (r *Replica) Expire(now time.Time) {
	if ttl := r.cfg.PrefixTTL; ttl > 0 {
		r.index.Expire(now.Add(-ttl))
	}
}
