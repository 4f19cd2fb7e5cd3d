package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/sim"
)

// ErrBadConfig marks a Config that cannot be simulated; the wrapped text names
// the field.
var ErrBadConfig = errors.New("fleet: invalid config")

// Sync says how the router replicas share their load counts and their
// prefix ownership.
type Sync string

// The ways replicas share state.
const (
	// SyncGossip runs loadsync's State on every replica over a simulated
	// network: the design of this project.
	SyncGossip Sync = "gossip"
	// SyncNone keeps the replicas independent: each sees only its own
	// in-flight counts and its own routing decisions.
	SyncNone Sync = "none"
	// SyncShared gives every replica the same load table and index: exact
	// loads and every decision known at once, the upper bound.
	SyncShared Sync = "shared"
)

// SyncModes lists every Sync, for flag help and validation.
var SyncModes = []Sync{SyncGossip, SyncNone, SyncShared}

// Defaults of Config.
const (
	// DefaultGossipDelay is the one-way network delay of a gossip packet:
	// about a LAN round trip's half plus the receiver's scheduling.
	DefaultGossipDelay = time.Millisecond
	// DefaultModel is the model name every simulated request asks for.
	DefaultModel = "fleetsim"
	// policySeparator joins a policy and its miss placement in a policy
	// label, as in cache_aware:rendezvous.
	policySeparator = ":"
)

// Config describes one simulated run. Zero fields take the defaults named in
// their comments.
type Config struct {
	// Workers is the number of workers of a fleet without a prefill/decode
	// split. Ignored when Prefill is set.
	Workers int
	// Prefill and Decode are the worker counts of a disaggregated fleet;
	// both zero means no split.
	Prefill, Decode int
	// Replicas is the number of router replicas. Default 1.
	Replicas int
	// Sync is how replicas share state. Default SyncGossip.
	Sync Sync

	// Policy is the affinity policy of the (prefill) router. Default
	// cache_aware.
	Policy string
	// MissPlacement is the cache-aware miss placement. Default least_load.
	MissPlacement string
	// DecodePolicy is the policy of the decode router of a split fleet.
	// Default least_load.
	DecodePolicy string
	// Thresholds of the cache-aware policies. All zero means
	// affinity.DefaultThresholds.
	Thresholds affinity.Thresholds
	// BlockSize is the router's hash block, in bytes of routing text.
	// Default affinity.DefaultBlockSize (256).
	BlockSize int

	// Engine configures every worker's engine; zero fields take sim's
	// defaults. The ownership index gives each worker a budget of the
	// engine's KV capacity, in router blocks.
	Engine sim.Config
	// Slowdown makes some workers slower than the rest, by worker id: a
	// degraded or hot engine. Ids run from 1, prefill workers first in a
	// split fleet; a factor is sim.Config.Slowdown's (1 is healthy).
	Slowdown map[affinity.WorkerID]float64

	// GossipInterval is loadsync's LoadInterval. Default
	// loadsync.DefaultLoadInterval (100 ms).
	GossipInterval time.Duration
	// GossipFlushInterval is loadsync's LoadFlushInterval: how soon after
	// its last report a replica whose loads changed reports again. Default
	// loadsync.DefaultLoadFlushInterval; GossipInterval or more reports
	// only every GossipInterval.
	GossipFlushInterval time.Duration
	// GossipDelay is the one-way delay of every gossip packet. Default 1 ms;
	// negative means none.
	GossipDelay time.Duration
	// NoPeerShare turns off what a router replica does: every gossiping
	// replica counts, in the load it selects on, its peers' expected share
	// of its own last interval's reservations
	// (affinity.LoadTable.SetPeerShare). For before/after comparisons.
	NoPeerShare bool
	// NoDemotion makes replicas announce their decisions as they did before
	// a hit demoted the superseded deepest fact of its conversation to a
	// span of 1 (loadsync.State.OwnedBeyond): every turn charged the peers
	// again for the stretch since the last checkpoint. For before/after
	// comparisons.
	NoDemotion bool
	// NoCalibration keeps the index budgets as set: the engines' answers do
	// not calibrate them (core.Config.NoCalibration). For comparisons.
	NoCalibration bool
	// NoCalibrationGossip keeps each replica's calibration its own: its
	// judgements are not gossiped (core.Config.NoCalibrationGossip). For
	// comparisons.
	NoCalibrationGossip bool
	// OverloadOnReports makes a hit's overload check ignore the peer share
	// (affinity.Settings.OverloadOnReports). For comparisons.
	OverloadOnReports bool
	// Placer makes replica 0 the tier's placer: a replica that knows
	// nothing of a request's prefix asks it for the worker, one GossipDelay
	// each way, and the placer holds its reservation until the asker's load
	// report counts the request: the router's protocol (core.Placement).
	// With SyncGossip only.
	Placer bool
	// PlacerTimeout is how long, with Placer, an asker waits for the
	// placer's answer before it decides alone. Default the router's,
	// core.DefaultPlacerTimeout (50 ms).
	PlacerTimeout time.Duration
	// PlacerAnswerLoss is the probability, in [0, 1), that the placer's
	// answer to a question is lost on its way back: the asker decides
	// alone at PlacerTimeout and asks that placer nothing for
	// core.PlacerQuiet, as a router replica whose leader froze. Default 0.
	PlacerAnswerLoss float64
	// GossipLoss is the probability, in [0, 1), that a gossip packet is
	// lost on its way to one peer. Default 0.
	GossipLoss float64

	// Door runs each replica's admission door as the router does by
	// default (core.Door with admission.DefaultConfig): a request
	// waits at the replica it reached while the engines, by what that
	// replica last read of them, run all they can, and the wait is part
	// of its TTFT. Off: every request is routed as it arrives.
	Door bool
	// EngineScrapeInterval is how often, with Door, each replica reads
	// each engine's running, waiting and KV usage. Default
	// DefaultEngineScrapeInterval (1 s, the router's).
	EngineScrapeInterval time.Duration
	// DoorQueueTimeout is how long, with Door, a request may wait at its
	// door before it fails. Default the router's --queue-timeout-secs.
	DoorQueueTimeout time.Duration

	// Kills kill workers on virtual time (see Kill): each dead engine takes
	// nothing more, and the requests it held are cut and go on elsewhere as
	// the router's retries and migration take them. Not with a
	// prefill/decode split.
	Kills []Kill
	// MigrationLimit is the most times one request cut after its first
	// token resumes on another worker: the router's --migration-limit.
	// Default DefaultMigrationLimit (2); MigrationOff (any negative) turns
	// migration off, the router's --migration-limit 0: such a request fails.
	MigrationLimit int

	// StickySessions makes the load balancer session-sticky: every turn of
	// a closed-loop session reaches the same replica (the session's number
	// modulo the replicas), the control of a tier measurement. Arrivals of
	// no session (a trace) still go to a random replica.
	StickySessions bool

	// Seed drives every random choice: the load balancer, the policies'
	// randomness and gossip loss.
	Seed int64
	// Model is the model name of every request. Default DefaultModel.
	Model string
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	c.Replicas = cmpOr(c.Replicas, 1)
	c.Sync = cmpOr(c.Sync, SyncGossip)
	c.Policy = cmpOr(c.Policy, affinity.PolicyCacheAware)
	c.MissPlacement = cmpOr(c.MissPlacement, affinity.PlaceLeastPrefill)
	c.DecodePolicy = cmpOr(c.DecodePolicy, affinity.PolicyLeastLoad)
	if c.Thresholds == (affinity.Thresholds{}) {
		c.Thresholds = affinity.DefaultThresholds()
	}
	c.BlockSize = cmpOr(c.BlockSize, affinity.DefaultBlockSize)
	c.Engine = c.Engine.WithDefaults()
	c.GossipInterval = cmpOr(c.GossipInterval, loadsync.DefaultLoadInterval)
	c.GossipFlushInterval = cmpOr(c.GossipFlushInterval, loadsync.DefaultLoadFlushInterval)
	switch {
	case c.GossipDelay == 0:
		c.GossipDelay = DefaultGossipDelay
	case c.GossipDelay < 0:
		c.GossipDelay = 0
	}
	c.Model = cmpOr(c.Model, DefaultModel)
	c.EngineScrapeInterval = cmpOr(c.EngineScrapeInterval, DefaultEngineScrapeInterval)
	c.DoorQueueTimeout = cmpOr(c.DoorQueueTimeout, admission.DefaultConfig().QueueTimeout)
	c.PlacerTimeout = cmpOr(c.PlacerTimeout, core.DefaultPlacerTimeout)
	c.MigrationLimit = cmpOr(c.MigrationLimit, DefaultMigrationLimit)
	return c
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Disaggregated reports whether the fleet splits prefill and decode.
func (c Config) Disaggregated() bool { return c.Prefill > 0 || c.Decode > 0 }

// routedWorkers is the size of the pool the main policy chooses from.
func (c Config) routedWorkers() int {
	if c.Disaggregated() {
		return c.Prefill
	}
	return c.Workers
}

// totalWorkers is the number of engines.
func (c Config) totalWorkers() int {
	if c.Disaggregated() {
		return c.Prefill + c.Decode
	}
	return c.Workers
}

// Validate reports the first field of c (after defaults) that cannot be
// simulated, naming it, wrapped in ErrBadConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, check := range []struct {
		field string
		bad   bool
		want  string
		got   any
	}{
		{"Workers", !c.Disaggregated() && c.Workers <= 0, "> 0", c.Workers},
		{"Prefill", c.Disaggregated() && c.Prefill <= 0, "> 0 with Decode", c.Prefill},
		{"Decode", c.Disaggregated() && c.Decode <= 0, "> 0 with Prefill", c.Decode},
		{"Replicas", c.Replicas <= 0, "> 0", c.Replicas},
		{"Sync", !validSync(c.Sync), "one of " + syncNames(), c.Sync},
		{"BlockSize", c.BlockSize <= 0, "> 0", c.BlockSize},
		{"GossipInterval", c.GossipInterval <= 0, "> 0", c.GossipInterval},
		{"EngineScrapeInterval", c.EngineScrapeInterval <= 0, "> 0", c.EngineScrapeInterval},
		{"DoorQueueTimeout", c.DoorQueueTimeout <= 0, "> 0", c.DoorQueueTimeout},
		{"GossipLoss", !(c.GossipLoss >= 0 && c.GossipLoss < 1), "in [0, 1)", c.GossipLoss},
		{"PlacerTimeout", c.PlacerTimeout <= 0, "> 0", c.PlacerTimeout},
		{"PlacerAnswerLoss", !(c.PlacerAnswerLoss >= 0 && c.PlacerAnswerLoss < 1), "in [0, 1)", c.PlacerAnswerLoss},
	} {
		if check.bad {
			return fmt.Errorf("%w: %s: want %s, got %v", ErrBadConfig, check.field, check.want, check.got)
		}
	}
	if err := c.Thresholds.Validate(); err != nil {
		return fmt.Errorf("%w: Thresholds: %w", ErrBadConfig, err)
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("%w: Engine: %w", ErrBadConfig, err)
	}
	if err := c.validateSlowdown(); err != nil {
		return err
	}
	if err := c.validateKills(); err != nil {
		return err
	}
	return c.validatePolicies()
}

func (c Config) validateSlowdown() error {
	for id, f := range c.Slowdown {
		if id < 1 || int(id) > c.totalWorkers() {
			return fmt.Errorf("%w: Slowdown: worker %d not in [1, %d]", ErrBadConfig, id, c.totalWorkers())
		}
		if err := sim.ValidateSlowdown(f); err != nil {
			return fmt.Errorf("%w: Slowdown of worker %d: %w", ErrBadConfig, id, err)
		}
	}
	return nil
}

// validatePolicies builds the policies once to check their names.
func (c Config) validatePolicies() error {
	ix := affinity.NewIndex(clock.RealClock{}, 1)
	if _, err := affinity.NewPolicy(c.settings(c.Policy, nil), ix); err != nil {
		return fmt.Errorf("%w: Policy: %w", ErrBadConfig, err)
	}
	if _, err := affinity.NewPolicy(c.settings(c.DecodePolicy, nil), ix); err != nil {
		return fmt.Errorf("%w: DecodePolicy: %w", ErrBadConfig, err)
	}
	return nil
}

// settings are the affinity settings of policy with random bits from rnd.
func (c Config) settings(policy string, rnd func() uint64) affinity.Settings {
	return affinity.Settings{
		Policy: policy, Thresholds: c.Thresholds, MissPlacement: c.MissPlacement,
		BlockSize: c.BlockSize, Rand: rnd, OverloadOnReports: c.OverloadOnReports,
	}
}

func validSync(s Sync) bool {
	for _, m := range SyncModes {
		if s == m {
			return true
		}
	}
	return false
}

func syncNames() string {
	names := make([]string, len(SyncModes))
	for i, m := range SyncModes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// ParsePolicy splits a policy label into the policy and its miss placement:
// "cache_aware" is cache_aware with the default least_prefill placement,
// "cache_aware:rendezvous" the same policy placing misses by rendezvous
// hashing. Only the cache-aware policies take a placement. Names are checked
// by Validate, not here.
func ParsePolicy(label string) (policy, placement string, err error) {
	policy, placement, found := strings.Cut(label, policySeparator)
	if !found {
		return policy, affinity.PlaceLeastPrefill, nil
	}
	if policy != affinity.PolicyCacheAware && policy != affinity.PolicyFleetGate {
		return "", "", fmt.Errorf("%w: policy %q: only %s and %s take a miss placement",
			ErrBadConfig, label, affinity.PolicyCacheAware, affinity.PolicyFleetGate)
	}
	return policy, placement, nil
}

// PolicyLabel is the inverse of ParsePolicy: the policy, followed by
// ":" and the placement when a cache-aware policy places misses other than
// the default way.
func (c Config) PolicyLabel() string {
	c = c.withDefaults()
	cacheAware := c.Policy == affinity.PolicyCacheAware || c.Policy == affinity.PolicyFleetGate
	if cacheAware && c.MissPlacement != affinity.PlaceLeastPrefill {
		return c.Policy + policySeparator + c.MissPlacement
	}
	return c.Policy
}
