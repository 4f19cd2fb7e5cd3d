package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// Arrival is one request of a workload, due at a virtual instant.
type Arrival struct {
	// At is the arrival time, since the start of the run.
	At time.Duration
	// Prompt is the routing text; read-only, it may share bytes with other
	// arrivals.
	Prompt []byte
	// MaxTokens is the number of tokens to generate.
	MaxTokens int
	// SessionKey is the consistent_hash key (what the proxy derives from
	// X-Session-ID, or else from the whole body).
	SessionKey uint64
	// Session names the closed-loop session the arrival belongs to; -1 for
	// an open-loop request.
	Session int
}

// Workload feeds a run. The simulation asks it for arrivals as it goes, so a
// trace's prompts are synthesised one at a time, not all up front.
//
// Concurrency: one run calls one Workload from one goroutine.
type Workload interface {
	// Start returns the arrivals known at the start of the run.
	Start() []Arrival
	// Arrived is told that a was dispatched, and returns the open-loop
	// arrival that follows it, if any.
	Arrived(a Arrival) (Arrival, bool)
	// Completed is told that the request of a finished at virtual time at,
	// and returns the closed-loop arrival that follows it, if any.
	Completed(a Arrival, at time.Duration) (Arrival, bool)
}

// Trace replays trace records open loop at their timestamps divided by a
// rate scale, synthesising each prompt when its predecessor arrives.
type Trace struct {
	records   []workload.TraceRecord
	texts     *workload.Texts
	rateScale float64
	next      int
}

var _ Workload = (*Trace)(nil)

// NewTrace replays records (in their order) with timestamps divided by
// rateScale (1 when not positive).
func NewTrace(records []workload.TraceRecord, rateScale float64) *Trace {
	if !(rateScale > 0) {
		rateScale = 1
	}
	return &Trace{records: records, texts: workload.NewTexts(0), rateScale: rateScale}
}

// Start returns the first record's arrival.
func (t *Trace) Start() []Arrival {
	t.next = 0
	if a, ok := t.take(); ok {
		return []Arrival{a}
	}
	return nil
}

// Arrived returns the next record's arrival.
func (t *Trace) Arrived(Arrival) (Arrival, bool) { return t.take() }

// Completed returns nothing: a trace is open loop.
func (*Trace) Completed(Arrival, time.Duration) (Arrival, bool) { return Arrival{}, false }

func (t *Trace) take() (Arrival, bool) {
	if t.next >= len(t.records) {
		return Arrival{}, false
	}
	rec := t.records[t.next]
	t.next++
	prompt := t.texts.Prompt(rec)
	return Arrival{
		At:     time.Duration(float64(rec.Timestamp) / t.rateScale),
		Prompt: prompt, MaxTokens: max(rec.OutputLength, 1),
		// No session: the proxy would hash the whole body.
		SessionKey: xxh3.Hash(prompt), Session: -1,
	}, true
}

// Agentic runs closed-loop agentic sessions: every session's first turn at
// the start, each later turn its delay after the previous one completed.
//
// Sessions may come in groups, as RL rollouts do (several samples of one
// task): each group is a workload.Agentic of its own, with its own seed and
// so its own system prompt, which only that group's sessions share.
type Agentic struct {
	groups []*workload.Agentic
	// first[g] is the global number of group g's session 0.
	first []int
	keys  []uint64
}

var _ Workload = (*Agentic)(nil)

// NewAgentic returns the sessions of cfg in one group; it panics on a
// configuration that cfg.Validate refuses.
func NewAgentic(cfg workload.AgenticConfig) *Agentic {
	a, err := NewAgenticGroups(cfg, Groups{})
	if err != nil {
		panic(err)
	}
	return a
}

// Groups shapes agentic sessions into groups.
type Groups struct {
	// Count is the number of groups, at most the number of sessions.
	// Default 1.
	Count int
	// ObservationSpread makes groups unequal, as tasks are: group g's mean
	// observation length is the configured one times exp(spread * z_g),
	// z_g a standard normal draw from the workload's seed, the factor
	// clamped to [1/16, 16]. Default 0: all groups alike.
	ObservationSpread float64
}

// maxSpreadFactor bounds a group's observation-length factor either way, so
// that one unlucky draw cannot make a group's prompts absurd.
const maxSpreadFactor = 16

// NewAgenticGroups splits cfg.Sessions into g.Count groups of (nearly)
// equal size, group i seeded cfg.Seed+i. It refuses, with an error wrapping
// workload.ErrBadConfig, a configuration that cfg.Validate refuses, a group's
// that it would refuse, more groups than sessions, or a negative spread.
func NewAgenticGroups(cfg workload.AgenticConfig, g Groups) (*Agentic, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = workload.NewAgentic(cfg).Config()
	count := max(g.Count, 1)
	if count > cfg.Sessions || !(g.ObservationSpread >= 0) || math.IsInf(g.ObservationSpread, 1) {
		return nil, fmt.Errorf("%w: %d groups of %d sessions with observation spread %v",
			workload.ErrBadConfig, count, cfg.Sessions, g.ObservationSpread)
	}
	draws := rand.New(rand.NewPCG(uint64(cfg.Seed), streamGroups))
	a := &Agentic{}
	for i := range count {
		gc := cfg
		gc.Sessions = cfg.Sessions/count + boolInt(i < cfg.Sessions%count)
		gc.Seed = cfg.Seed + int64(i)
		if g.ObservationSpread > 0 {
			f := math.Exp(g.ObservationSpread * draws.NormFloat64())
			f = min(max(f, 1.0/maxSpreadFactor), maxSpreadFactor)
			gc.ObservationTokens = max(1, int(float64(cfg.ObservationTokens)*f))
		}
		if err := gc.Validate(); err != nil {
			return nil, fmt.Errorf("group %d: %w", i, err)
		}
		a.first = append(a.first, len(a.keys))
		for s := range gc.Sessions {
			// The X-Session-ID a load generator would send.
			a.keys = append(a.keys, xxh3.HashString("fleetsim-"+strconv.FormatInt(gc.Seed, 10)+"-"+strconv.Itoa(s)))
		}
		a.groups = append(a.groups, workload.NewAgentic(gc))
	}
	return a, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Start returns every session's first turn, at time zero.
func (a *Agentic) Start() []Arrival {
	var out []Arrival
	for g, sessions := range a.groups {
		for _, t := range sessions.Start() {
			out = append(out, a.arrival(g, t, 0))
		}
	}
	return out
}

// Arrived returns nothing: sessions are closed loop.
func (*Agentic) Arrived(Arrival) (Arrival, bool) { return Arrival{}, false }

// Completed returns the session's next turn, after its think time.
func (a *Agentic) Completed(prev Arrival, at time.Duration) (Arrival, bool) {
	g := a.group(prev.Session)
	t, ok := a.groups[g].Next(prev.Session - a.first[g])
	if !ok {
		return Arrival{}, false
	}
	return a.arrival(g, t, at+t.Delay), true
}

// group finds the group of global session number s.
func (a *Agentic) group(s int) int {
	g, _ := slices.BinarySearch(a.first, s+1)
	return g - 1
}

func (a *Agentic) arrival(g int, t workload.Turn, at time.Duration) Arrival {
	s := a.first[g] + t.Session
	return Arrival{At: at, Prompt: t.Prompt, MaxTokens: t.MaxTokens, SessionKey: a.keys[s], Session: s}
}
