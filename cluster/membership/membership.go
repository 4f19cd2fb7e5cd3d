package membership

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// Timeout bounds one reconciliation round's Raft calls.
const Timeout = 5 * time.Second

// Membership is the goroutine that keeps the Raft configuration in step
// with the gossip membership (Run), and what it remembers of the replicas
// that went away. Only Run's goroutine reads and writes joined, missing
// and stable; departed and seen are also read by the status page and the
// rejoin loop, under mu.
type Membership struct {
	cfg    Config
	raft   Raft
	gossip Source

	kick   chan struct{} // capacity 1: "membership changed, look again"
	joined bool          // this replica holds Raft state and announced it
	// missing is, on the leader, since when each Raft server has been
	// absent from the gossip membership.
	missing map[string]time.Time
	// stable is, on every replica, since when each Raft server has been
	// live at its address: a new leader knows at once who is stable.
	stable map[string]time.Time

	mu sync.Mutex
	// departed is how each replica that is not a live member went away,
	// until it rejoins; at most MaxDeparted entries, the oldest dropped.
	departed map[string]departure
	// seen is the last gossip address of every replica ever seen, for the
	// rejoin loop; at most MaxDeparted names besides the live ones.
	seen map[string]string
}

// New returns the membership of a replica; joined says whether it holds
// Raft state already (a restart, or a one-node cluster it bootstrapped).
func New(cfg Config, raft Raft, gossip Source, joined bool) *Membership {
	return &Membership{cfg: cfg.withDefaults(), raft: raft, gossip: gossip, kick: make(chan struct{}, 1),
		joined: joined, departed: map[string]departure{}, seen: map[string]string{}}
}

// Joined reports whether this replica holds Raft state and announced it.
// Read it before Run starts or after it ended.
func (m *Membership) Joined() bool { return m.joined }

// MemberChanged is the gossip's OnMember: it notes departures for the
// status page and wakes the reconciliation. Safe from any goroutine.
func (m *Membership) MemberChanged(ev loadsync.MemberEvent) {
	m.note(ev, m.cfg.Clock.Now())
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run reconciles at every membership event, every leadership change and
// every ReconcileInterval, until ctx ends.
func (m *Membership) Run(ctx context.Context) {
	tick := m.cfg.Clock.NewTicker(m.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		leaderChanged := m.raft.LeaderChanges()
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		case <-m.kick:
		case <-leaderChanged:
		}
	}
}

// reconcile is one round: bootstrap when this replica is the one to,
// announce when it has joined, and, on the leader, bring the Raft
// configuration in line with the gossip membership.
func (m *Membership) reconcile(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	servers, err := m.raft.Servers(ctx)
	if err != nil {
		m.cfg.Logger.Debug("membership: cannot read the raft configuration", "err", err)
		return
	}
	if !m.joined {
		if len(servers) == 0 {
			m.maybeBootstrap(ctx)
			return
		}
		m.announceJoined()
	}
	live := LiveRaftAddrs(m.gossip.Members())
	now := m.cfg.Clock.Now()
	m.stable = TrackStable(m.stable, servers, live, now)
	if !m.raft.IsLeader() {
		m.missing = nil // a later leadership starts its clocks afresh
		return
	}
	m.missing = TrackMissing(m.missing, m.cfg.Self, servers, live, m.gossip.Reporting(now), now)
	for _, c := range Plan(m.cfg, Observed{Servers: servers, Live: live, Missing: m.missing, Stable: m.stable, Now: now}) {
		m.change(ctx, c)
	}
}

// maybeBootstrap bootstraps the Raft cluster when Expect replicas have
// found each other and this one is the lowest-named of them.
func (m *Membership) maybeBootstrap(ctx context.Context) {
	if m.cfg.Expect < 2 {
		return // alone it bootstrapped at start; with --join it waits to be added
	}
	voters := BootstrapVoters(m.cfg.Self, m.cfg.Expect, m.gossip.Members())
	if voters == nil {
		return
	}
	if err := m.raft.Bootstrap(ctx, voters); err != nil {
		m.cfg.Logger.Warn("membership: bootstrap failed; will retry", "err", err)
		return
	}
	m.cfg.Logger.Info("membership: bootstrapped the raft cluster", "voters", ServerIDs(voters))
}

// announceJoined tells the peers that this replica holds Raft state, so a
// replica started later with --bootstrap-expect joins the existing cluster
// instead of bootstrapping another.
func (m *Membership) announceJoined() {
	m.joined = true
	if err := m.gossip.AnnounceJoined(); err != nil {
		m.cfg.Logger.Debug("membership: announcing that this replica joined", "err", err)
	}
}

func (m *Membership) change(ctx context.Context, c Change) {
	var err error
	switch c.Op {
	case OpAddNonvoter:
		err = m.raft.AddNonvoter(ctx, c.ID, c.Addr)
	case OpAddVoter:
		err = m.raft.AddVoter(ctx, c.ID, c.Addr)
	case OpRemove:
		err = m.raft.RemoveServer(ctx, c.ID)
	}
	if err != nil {
		m.cfg.Logger.Warn("membership: raft configuration change failed; will retry", "node", c.ID, "change", c.Why, "err", err)
		return
	}
	m.cfg.Logger.Info("membership: raft configuration changed", "node", c.ID, "addr", c.Addr, "change", c.Why)
}
