package membership

import (
	"log/slog"
	"time"

	"k8s.io/utils/clock"
)

// DefaultStabilization is Config.Stabilization when unset: how long a
// non-voter must have been live at its address before it may be promoted,
// as raft-autopilot's ServerStabilizationTime. Autopilot waits 10 s; here a
// seat is empty while the wait runs (a reaped voter's), and the tier
// promises its membership whole within 10 s of a partition healing, so the
// wait is short: long enough to pass over a replica that flaps within
// seconds, short enough that a 60 s partition heals in under 10 s (its
// chaos scenario measured 8.7 s with a 5 s wait at load 8).
const DefaultStabilization = 3 * time.Second

// Config configures a Membership.
type Config struct {
	// Self is this replica's node name (--node-name).
	Self string
	// Expect is the size of the voter set (--bootstrap-expect).
	Expect int
	// Join are the gossip addresses given with --join, tried again by the
	// rejoin loop after the missing members' last addresses.
	Join []string
	// ReconcileInterval is how often Run looks again without an event.
	ReconcileInterval time.Duration
	// ReapTimeout is how long a server may be missing before the leader
	// removes it.
	ReapTimeout time.Duration
	// Stabilization is how long a non-voter must have been live at its
	// address before it is promoted to refill the voters. Default
	// DefaultStabilization.
	Stabilization time.Duration
	// Clock is the time membership reads; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Stabilization <= 0 {
		c.Stabilization = DefaultStabilization
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
