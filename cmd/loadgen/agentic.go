package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// sessionHeader carries a session's identity, the key of the router's consistent_hash policy.
const sessionHeader = "X-Session-ID"

// agentic runs the sessions of cfg closed loop: each session sends a turn, waits for it to
// finish and for its think time, then sends the next. A failed turn does not end its session
// (an agent would retry; the prompts that follow do not depend on the answer). It returns when
// every session has ended or ctx is done.
func (r *run) agentic(ctx context.Context, start time.Time, cfg workload.AgenticConfig) {
	sessions := workload.NewAgentic(cfg)
	var wg sync.WaitGroup
	for _, first := range sessions.Start() {
		wg.Go(func() { r.session(ctx, start, sessions, first) })
	}
	wg.Wait()
}

// session drives one session from its first turn to its last.
func (r *run) session(ctx context.Context, start time.Time, sessions *workload.Agentic, turn workload.Turn) {
	header := http.Header{}
	header.Set(sessionHeader, fmt.Sprintf("loadgen-%d-%d", sessions.Config().Seed, turn.Session))
	model := r.model
	if r.mix != nil {
		model = r.mix.of(turn.Session)
	}
	for {
		if sleep(ctx, r.clock, turn.Delay) != nil {
			return
		}
		r.results.started()
		r.send(ctx, turn.Request(model), header, result{id: turn.Session, turn: turn.Index, dispatched: r.clock.Now().Sub(start)})
		next, ok := sessions.Next(turn.Session)
		if !ok || ctx.Err() != nil {
			return
		}
		turn = next
	}
}
