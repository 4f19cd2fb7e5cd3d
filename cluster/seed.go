package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/store"
)

// seeder puts the command-line workers (seeds) and the routing config
// into the registry, through the leader (apply), and waits for this
// replica's copy to hold them.
type seeder struct {
	raft    *raftnode.Node
	fsm     *store.FSM
	routing *routingFollower
	apply   func(ctx context.Context, cmd store.Command) (store.Result, error)
	seeds   []Seed
	log     *slog.Logger
	clock   clock.WithTicker
}

// seedTimeout bounds one attempt at seeding.
const seedTimeout = 30 * time.Second

// retry retries seeding every second until it succeeds, the registry's
// routing config is found to differ, or ctx ends (the replica stops).
func (s *seeder) retry(ctx context.Context) {
	for {
		err := s.now(ctx, membership.Timeout)
		switch {
		case err == nil:
			return
		case errors.Is(err, store.ErrConfigMismatch):
			s.log.Error("the registry's block size differs from this replica's; its hashes mean nothing to the others", "err", err)
			return
		case ctx.Err() != nil:
			return
		}
		s.log.Debug("seeding the registry; will retry", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(time.Second):
		}
	}
}

// now seeds the registry once, within timeout.
func (s *seeder) now(ctx context.Context, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := s.raft.WaitForLeader(wait); err != nil {
		return fmt.Errorf("no raft leader to register workers with: %w", err)
	}
	routing := s.routing.fromFlags()
	seed := store.Seed{Routing: &routing}
	for _, w := range s.seeds {
		seed.Workers = append(seed.Workers, store.AddWorker{URL: w.URL, Role: store.Role(w.Role), BootstrapPort: w.BootstrapPort,
			KVEventsEndpoint: w.KVEventsEndpoint})
	}
	res, err := s.apply(wait, store.NewSeed(seed))
	if err != nil {
		return fmt.Errorf("seeding the registry: %w", err)
	}
	if !res.Created && len(s.seeds) > 0 {
		s.log.Info("the registry was seeded before: --worker-urls, --prefill and --decode are not applied again; change workers through the admin API")
	}
	if err := s.awaitApplied(wait, res.Index); err != nil {
		return err
	}
	return s.routing.registryBlockSize()
}

// awaitApplied waits until this replica's registry reflects log index
// index (a write forwarded to the leader reaches the follower a moment
// later).
func (s *seeder) awaitApplied(ctx context.Context, index uint64) error {
	for {
		reg, changed := s.fsm.Watch()
		if reg.Index() >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the registry to reach index %d: %w", index, ctx.Err())
		}
	}
}
