package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/sim/fleet"
)

// row is one run's line of the report: the simulation's result and what
// only the command knows.
type row struct {
	fleet.Result
	// InfiniteCacheHitRate is the trace's hit rate with one infinite cache
	// seen by one global router: the bound no routing beats. Absent for
	// agentic runs.
	InfiniteCacheHitRate *float64 `json:"infinite_cache_hit_rate,omitempty"`
	// WallSeconds is how long the run took on this machine: the only
	// figure that differs between two runs of the same flags.
	WallSeconds float64 `json:"wall_seconds"`
}

// configs lists the runs of p: every policy, then every sync mode, then
// every replica count.
func (p plan) configs() []fleet.Config {
	var out []fleet.Config
	for _, label := range p.policies {
		policy, placement, _ := fleet.ParsePolicy(label) // checked by readMatrix
		for _, sync := range p.syncs {
			for _, n := range p.replicas {
				cfg := p.base
				cfg.Policy, cfg.MissPlacement, cfg.Sync, cfg.Replicas = policy, placement, sync, n
				out = append(out, cfg)
			}
		}
	}
	return out
}

// execute runs the plan, reports progress on stderr, and writes the table
// and the JSON file.
func execute(p plan, stdout, stderr io.Writer) error {
	rows, err := p.runAll(stderr)
	if err != nil {
		return err
	}
	if err := writeTable(stdout, rows); err != nil {
		return err
	}
	if p.jsonPath != "" {
		return writeJSON(p.jsonPath, rows)
	}
	return nil
}

// runAll simulates every configuration of p, p.parallel at a time, and
// returns the rows in the order of configs. The workers it starts are done
// when it returns.
func (p plan) runAll(stderr io.Writer) ([]row, error) {
	configs := p.configs()
	rows := make([]row, len(configs))
	errs := make([]error, len(configs))
	var progress sync.Mutex
	done := 0
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(p.parallel, len(configs)) {
		wg.Go(func() {
			for i := range work {
				rows[i], errs[i] = p.runOne(configs[i])
				progress.Lock()
				done++
				fmt.Fprintf(stderr, "fleetsim: %d/%d %s replicas=%d sync=%s: %.1fs\n", done, len(configs),
					configs[i].PolicyLabel(), configs[i].Replicas, configs[i].Sync, rows[i].WallSeconds)
				progress.Unlock()
			}
		})
	}
	for i := range configs {
		work <- i
	}
	close(work)
	wg.Wait()
	return rows, errors.Join(errs...)
}

// runOne simulates one configuration on a fresh workload.
func (p plan) runOne(cfg fleet.Config) (row, error) {
	start := time.Now()
	res, err := fleet.Run(cfg, p.workload())
	if err != nil {
		return row{}, fmt.Errorf("%s replicas=%d sync=%s: %w", cfg.PolicyLabel(), cfg.Replicas, cfg.Sync, err)
	}
	return row{Result: res, InfiniteCacheHitRate: p.bound, WallSeconds: time.Since(start).Seconds()}, nil
}
