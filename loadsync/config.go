package loadsync

import (
	"fmt"
	"time"
)

// Defaults of Config, in one place.
const (
	// DefaultLoadInterval is 100 ms: a peer's view of our load is at most
	// one interval plus the network old (about 50 ms on average), well
	// under the 200 ms at which bursts were seen to herd onto one worker,
	// and a full report costs (peers x 10) small packets per second.
	DefaultLoadInterval = 100 * time.Millisecond
	// DefaultLoadFlushInterval is how soon after the previous report a
	// change of this replica's loads is reported: a tier's misses herd onto
	// the worker every replica sees idle while the reports lag, and with
	// reports a full interval apart at 1 s between agentic turns the
	// tier's TTFT p99 was 1.3-1.5x one replica's (BENCHMARKS.md). An idle
	// replica still reports once per LoadInterval.
	DefaultLoadFlushInterval = 10 * time.Millisecond
	// DefaultLoadTTL drops an origin after three missed reports plus
	// 200 ms of slack for scheduling hiccups.
	DefaultLoadTTL = 3*DefaultLoadInterval + 200*time.Millisecond
	// DefaultFullReportInterval is how often a replica sends its full load
	// report; the reports between are deltas against the last full one.
	// A receiver that lost a full report is inexact for at most this long
	// (plus one interval), and one that joined learns every count within
	// it: one second costs at 64 replicas x 1024 workers about a tenth of
	// what full reports every interval cost (v0.1.0's gossip budget, in
	// BENCHMARKS.md's git history).
	DefaultFullReportInterval = time.Second
	// DefaultMaxPacketBytes keeps a packet, with memberlist's framing and
	// encryption (35 bytes), under a 1400-byte UDP payload.
	DefaultMaxPacketBytes = 1300
	// DefaultDigestQueueFacts bounds the facts waiting to be sent.
	DefaultDigestQueueFacts = 16384
	// DefaultDigestPacketsPerTick bounds digest bandwidth: 8 packets of
	// about 110 facts per interval, some 9k facts per second per peer.
	DefaultDigestPacketsPerTick = 8
	// DefaultRecentSetFacts bounds the set of facts recently sent or
	// learned that Owned skips.
	DefaultRecentSetFacts = 1 << 16
	// DefaultRefreshInterval is how often a fact that routing decisions
	// keep making is announced again: peers' indexes then see the whole
	// prefix of a live conversation as recently used, as their own inserts
	// would, instead of letting its checkpoints age out while one new
	// deepest block per turn arrives.
	DefaultRefreshInterval = time.Second
	// DefaultFullStateFacts is how many of the most recent facts a
	// joining replica receives (about 720 KB).
	DefaultFullStateFacts = 1 << 16
	// DefaultPushPullFacts is how many recent facts the periodic
	// anti-entropy push/pull carries (it repairs lost digest packets, which
	// are recent ones).
	DefaultPushPullFacts = 4096
	// DefaultLagSamples is the size of the window of lag samples.
	DefaultLagSamples = 4096

	minPacketBytes = 256
	maxPacketBytes = 65000
	// maxMetaBytes is memberlist's limit on node metadata.
	maxMetaBytes = 512
)

// WorkerLoad is one worker's in-flight request count at one replica.
type WorkerLoad struct {
	Worker   uint32
	InFlight int64
}

// Fact says that the block with chained hash Hash is cached on Worker, and
// so is the prefix it ends.
type Fact struct {
	Hash   uint64
	Worker uint32
	// Span is how many blocks of that prefix the fact stands for: its depth
	// minus the depth of the next shallower fact announced for the same
	// routing decision (1 for the first block), so the facts of one
	// decision add up to its chain length. A receiver charges it to the
	// worker's cache budget, as it would the blocks themselves. Owned
	// makes it at least 1, but for a conversation's earlier deepest fact
	// that a deeper one now stands for, announced again with
	// affinity.SpanSuperseded (0); a fact's identity, for deduplication, is
	// (Hash, Worker) alone.
	Span uint32
}

// Config configures a State. Zero durations and sizes take the defaults
// above. Callbacks may be nil.
type Config struct {
	// Origin is this replica's node name, unique in the cluster
	// (memberlist's node name). Required, at most 128 bytes.
	Origin string
	// BootEpoch orders this process's reports after those of any earlier
	// process with the same Origin; use the start time in nanoseconds.
	BootEpoch uint64
	// ClusterConfig holds the named settings every replica must agree on
	// (block size, hash seed, ...). A peer that differs is refused at join
	// with an error naming each differing field. Names and values are at
	// most 128 bytes, and the encoded Meta at most 512.
	ClusterConfig map[string]string
	// Tags are named values announced to the peers with the metadata but
	// never compared: the addresses of this replica's other services, say.
	// Same size limits as ClusterConfig; SetTags replaces them later. The
	// names release, wire and types are reserved (compat.go).
	Tags map[string]string
	// Release names this build ("v0.2.0"), announced to the peers and
	// named in the error that refuses a peer of a build that cannot share
	// the tier. Empty announces none.
	Release string
	// ChannelTypes are the message types of the gossip channels this
	// replica runs (GossipConfig.Channels), announced with the State's own
	// so that a peer sends a channel's packets only to the replicas that
	// run it.
	ChannelTypes []byte
	// Wires are the version ranges this build speaks of the wires beside
	// the gossip, by name (the cluster port's RPCs, Raft's log entries, the
	// registry on disk): a peer that speaks none of a wire's versions is
	// refused at join (*VersionMismatchError). The gossip's own protocol is
	// announced and compared as "gossip".
	Wires map[string]VersionRange
	// LegacyWires are the versions a peer that announces none speaks: a
	// build from before versions were announced.
	LegacyWires map[string]VersionRange
	// asLegacyBuild makes the State behave as a build of v0.1.0 on the
	// wire, for tests: it announces no build and reads only the types that
	// build read, counting any other as unknown.
	asLegacyBuild bool

	// LoadInterval is how often Tick emits a load report and flushes
	// digests while this replica's loads do not change. Default
	// DefaultLoadInterval.
	LoadInterval time.Duration
	// LoadFlushInterval: when this replica's loads changed since its last
	// report, Tick reports (and flushes digests) as soon as this long has
	// passed since that report, without waiting for LoadInterval. Default
	// DefaultLoadFlushInterval; LoadInterval or more reports only every
	// LoadInterval.
	LoadFlushInterval time.Duration
	// LoadTTL drops an origin whose reports stopped arriving for longer.
	// Default DefaultLoadTTL; must exceed LoadInterval.
	LoadTTL time.Duration
	// FullReportInterval is how often Tick emits a full load report; the
	// reports between are deltas of the counts changed since the last full
	// one. A delta as large as the full report is replaced by the full
	// report. A value not above LoadInterval makes every report full.
	// Default DefaultFullReportInterval.
	FullReportInterval time.Duration
	// MaxPacketBytes bounds every packet Tick returns. Default 1300,
	// between 256 and 65000.
	MaxPacketBytes int
	// DigestQueueFacts bounds facts waiting to be sent; on overflow the
	// oldest are dropped and counted. Default DefaultDigestQueueFacts.
	DigestQueueFacts int
	// DigestPacketsPerTick bounds digest packets per Tick. Default 8.
	DigestPacketsPerTick int
	// RecentSetFacts bounds the recently sent or learned set used to skip
	// repeated facts. Default 65536.
	RecentSetFacts int
	// RefreshInterval: Owned skips a fact it sent less than half of this
	// ago and announces it again after at most this long. Default 1 s.
	RefreshInterval time.Duration
	// FullStateFacts bounds LocalState for a join, and the ring of recent
	// facts it is taken from. Default 65536.
	FullStateFacts int
	// PushPullFacts bounds LocalState for periodic anti-entropy.
	// Default 4096.
	PushPullFacts int
	// LagSamples is the window of lag samples Lag summarises.
	// Default 4096.
	LagSamples int

	// LocalLoads appends this replica's own in-flight counts to dst and
	// returns it. Called by Tick, at most twice per LoadFlushInterval;
	// entries with zero load may be included and are skipped. Must not
	// call into State.
	LocalLoads func(dst []WorkerLoad) []WorkerLoad
	// OnRemoteLoad is called whenever the sum of the other replicas'
	// counts for a worker changes, with the new sum. It runs with the
	// load lock held, so calls are ordered; it must be fast and must not
	// call into State.
	OnRemoteLoad func(worker uint32, remote int64)
	// LocalBacklogs appends this replica's own prefill backlog per worker
	// (bytes of uncached prompt its in-flight requests still wait on) to
	// dst and returns it, like LocalLoads; nil sends none.
	LocalBacklogs func(dst []WorkerLoad) []WorkerLoad
	// OnRemoteBacklog is OnRemoteLoad for the peers' prefill backlogs.
	OnRemoteBacklog func(worker uint32, remote int64)
	// KnownWorker, if set, says whether a worker is one the replica knows
	// (its registry's). A peer's counts for any other worker are dropped as
	// they arrive, so what State holds never grows with what peers make up.
	// It runs on the receiving goroutine; it must be fast and must not call
	// into State.
	KnownWorker func(worker uint32) bool
	// OnOwnership is called for every fact learned from a peer (digest or
	// full state). It may be called from several goroutines at once and
	// must not call into State.
	OnOwnership func(f Fact)
	// LocalVerdicts appends this replica's current verdicts against
	// workers (wedged, degraded, ...) to dst and returns it. Called by Tick
	// once per LoadInterval. Must not call into State.
	LocalVerdicts func(dst []Verdict) []Verdict
	// OnVerdicts is called whenever the verdicts held for a peer change:
	// with its new set, or with nil when it withdrew them, left, died or
	// stopped refreshing them for LoadTTL. It runs with the verdict lock
	// held, so calls are ordered; it must be fast and must not call into
	// State.
	OnVerdicts func(origin string, verdicts []Verdict)
	// LocalQueues appends this replica's admission queue depths (see
	// QueueDepth) to dst and returns it. Called by Tick with every report;
	// at most MaxQueueDepths of them, the longest queues first, are sent.
	// Must not call into State.
	LocalQueues func(dst []QueueDepth) []QueueDepth
	// OnQueues is called with every newer queue report of a peer, and with
	// nil when the peer left, died or sent none for LoadTTL. It runs with
	// the queue lock held, so calls are ordered; it must be fast, must not
	// keep depths, and must not call into State.
	OnQueues func(origin string, depths []QueueDepth)
	// OnCalibration is called with every peer's calibration of a known
	// worker (see State.Judged), its counts capped at 64 each. It may be
	// called from several goroutines at once, must be fast and must not
	// call into State.
	OnCalibration func(c Calibration)
	// CountedAnswers says which of the placer's answers to this replica's
	// questions its load report counts. Called with every load report,
	// before LocalLoads, so every answer it names is in the loads read
	// after it; sent only when it changed (Counted). Must not call into
	// State.
	CountedAnswers func() Counted
	// OnCounted is called with every peer's Counted, after the load report
	// it follows. It runs on the receiving goroutine; it must be fast and
	// must not call into State.
	OnCounted func(origin string, c Counted)
}

func (c Config) withDefaults() Config {
	c.LoadInterval = orDefault(c.LoadInterval, DefaultLoadInterval)
	c.LoadFlushInterval = min(orDefault(c.LoadFlushInterval, DefaultLoadFlushInterval), c.LoadInterval)
	c.LoadTTL = orDefault(c.LoadTTL, DefaultLoadTTL)
	c.FullReportInterval = orDefault(c.FullReportInterval, DefaultFullReportInterval)
	c.MaxPacketBytes = orDefault(c.MaxPacketBytes, DefaultMaxPacketBytes)
	c.DigestQueueFacts = orDefault(c.DigestQueueFacts, DefaultDigestQueueFacts)
	c.DigestPacketsPerTick = orDefault(c.DigestPacketsPerTick, DefaultDigestPacketsPerTick)
	c.RecentSetFacts = orDefault(c.RecentSetFacts, DefaultRecentSetFacts)
	c.RefreshInterval = orDefault(c.RefreshInterval, DefaultRefreshInterval)
	c.FullStateFacts = orDefault(c.FullStateFacts, DefaultFullStateFacts)
	c.PushPullFacts = orDefault(c.PushPullFacts, DefaultPushPullFacts)
	c.LagSamples = orDefault(c.LagSamples, DefaultLagSamples)
	return c
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (c Config) validate() error {
	switch {
	case c.Origin == "":
		return fmt.Errorf("%w: Origin is empty", ErrInvalidConfig)
	case len(c.Origin) > maxNameBytes:
		return fmt.Errorf("%w: Origin is %d bytes, over %d", ErrInvalidConfig, len(c.Origin), maxNameBytes)
	case c.LoadTTL <= c.LoadInterval:
		return fmt.Errorf("%w: LoadTTL %v must exceed LoadInterval %v", ErrInvalidConfig, c.LoadTTL, c.LoadInterval)
	case c.MaxPacketBytes < minPacketBytes || c.MaxPacketBytes > maxPacketBytes:
		return fmt.Errorf("%w: MaxPacketBytes %d outside [%d, %d]", ErrInvalidConfig, c.MaxPacketBytes, minPacketBytes, maxPacketBytes)
	}
	return validMap("ClusterConfig", c.ClusterConfig)
}

// validMap checks the names and values of a map announced in the metadata.
func validMap(what string, m map[string]string) error {
	for k, v := range m {
		if k == "" || len(k) > maxNameBytes || len(v) > maxNameBytes {
			return fmt.Errorf("%w: %s field %q: name must be 1-%d bytes and value at most %d",
				ErrInvalidConfig, what, k, maxNameBytes, maxNameBytes)
		}
	}
	return nil
}

// ReportLag is how far a peer's view of this replica's loads trails them
// while they change: the flush interval (the peers' share of a burst,
// affinity.LoadTable.SetPeerShare, covers that long).
func (c Config) ReportLag() time.Duration { return c.LoadFlushInterval }

// flushes reports whether changed loads are reported before LoadInterval
// (withDefaults caps LoadFlushInterval at LoadInterval).
func (c Config) flushes() bool { return c.LoadFlushInterval < c.LoadInterval }
