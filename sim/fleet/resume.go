package fleet

import (
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/virtualclock"
	"github.com/kvrouter/kvrouter/sim"
)

// A request whose worker dies (Config.Kills) goes on as the router takes
// it on. Cut before its first token, nothing reached the client: the
// attempt failed, and it is retried on another worker after the router's
// backoff (proxy.Retry). Cut after, the stream resumes (proxy/migrate.go):
// a continuation whose prompt is the original one followed by the text
// generated so far, asking for the tokens not generated yet, is routed at
// once by the same replica's decision over its prompt among the candidates
// the stream has not used, up to the migration limit. The engine's prefix
// cache sees the continuation's prompt as any other, so it finds the
// conversation's blocks where they are held. The client sees one stream:
// its TTFT is its first piece's, and the pause from the cut to the
// continuation's first token is counted apart.

// Defaults of the router that a cut request meets.
const (
	// DefaultMigrationLimit is the router's --migration-limit default
	// (proxy.DefaultMigration).
	DefaultMigrationLimit = 2
	// MigrationOff is a Config.MigrationLimit that turns migration off:
	// any negative does.
	MigrationOff = -1
	// retryAttempts is the most attempts of one request, or of one
	// continuation, the first included: the router's --retry-max-retries
	// default.
	retryAttempts = 5
	// retryBackoff is the router's pause before a retry
	// (--retry-initial-backoff-ms), without its jitter and its growth
	// from one retry to the next.
	retryBackoff = 50 * time.Millisecond
)

// stream is what a request's client has of its answer, and what a cut
// carries to the next worker: the proxy's splice and its route's
// streamed workers.
type stream struct {
	// prompt and maxTokens are the current piece's: the arrival's, or a
	// continuation's.
	prompt    []byte
	maxTokens int
	// delivered counts the tokens the client got from pieces that were
	// cut; streamed lists the workers of those pieces, which a
	// continuation avoids.
	delivered int
	streamed  []affinity.WorkerID
	// cuts counts the times the request was cut, resumes its
	// continuations that streamed (against the limit), attempts the
	// current piece's attempts cut before their first token.
	cuts, resumes, attempts int
	// resuming says the current piece continues a cut stream and has not
	// streamed yet: its first token ends the pause that began at cutAt.
	resuming bool
	cutAt    time.Duration
}

func newStream(a Arrival) stream { return stream{prompt: a.Prompt, maxTokens: a.MaxTokens} }

// migration takes cut requests on as the router does: it retries them,
// resumes them or fails them, and counts what it did.
type migration struct {
	cfg    Config // MigrationLimit and Engine.BytesPerToken
	clock  *virtualclock.Clock
	agenda *agenda
	stats  *collector
	// inflight is the simulation's requests by id: a new attempt replaces
	// the previous one there.
	inflight map[sim.RequestID]*request
	// route routes a request (again), fail retires one that cannot go on.
	route, fail func(req *request)
}

// cut takes a request off its dead worker, whose engine had generated
// u.Completion tokens of the current piece: retried when it had none,
// else resumed.
func (m *migration) cut(req *request, u sim.Usage) {
	dead := req.on
	req.on = nil
	req.release()
	st := &req.stream
	st.cuts++
	m.stats.cuts++
	if u.Completion == 0 {
		m.retry(req)
		return
	}
	// The piece streamed, so it is no continuation still waiting for its
	// first token: the pause starts now.
	st.cutAt = m.clock.Elapsed()
	st.delivered += u.Completion
	st.streamed = append(st.streamed, dead.id)
	if st.resumes >= m.limit() {
		m.fail(req)
		return
	}
	st.prompt = continuation(req.arrival.Prompt, st.delivered, m.cfg.Engine.BytesPerToken)
	st.maxTokens = req.arrival.MaxTokens - st.delivered
	st.resuming, st.attempts = true, 0
	m.route(m.renew(req))
}

// limit is Config.MigrationLimit with off as 0.
func (m *migration) limit() int { return max(m.cfg.MigrationLimit, 0) }

// retry routes again, after the router's backoff, a request whose attempt
// failed before its first token, until its attempts run out.
func (m *migration) retry(req *request) {
	st := &req.stream
	if st.attempts++; st.attempts >= retryAttempts {
		m.fail(req)
		return
	}
	m.stats.retried++
	m.agenda.push(event{at: m.clock.Elapsed() + retryBackoff, kind: evRetry, req: m.renew(req)})
}

// renew makes req's next attempt: a copy with its stream and its place at
// the door, and no question to the placer. The placer's messages about the
// previous attempt that are still on the agenda act on that attempt, whose
// question has ended, and not on the new one's.
func (m *migration) renew(req *request) *request {
	next := *req
	next.asking, next.placed, next.refused = nil, affinity.Decision{}, false
	req.ticket = nil
	m.inflight[req.id] = &next
	return &next
}

// streamed counts the first token of a request's current piece: the
// client's first token, or the end of a resumed stream's pause.
func (m *migration) streamed(req *request, at time.Duration) {
	st := &req.stream
	st.attempts = 0
	if !st.resuming {
		m.stats.firstToken(at-req.arrival.At, req.doorWait())
		return
	}
	st.resuming = false
	st.resumes++
	m.stats.resumed(at - st.cutAt)
}

// continuation is the prompt that continues a generation of prompt after
// tokens were generated: the prompt followed by their text, as the router
// writes it (proxy/resume.go). The text of token i is a word of the
// engine's width drawn from the prompt and i, so that every continuation
// of one generation extends the previous one's prompt, as the text
// workersim generates does.
func continuation(prompt []byte, tokens, width int) []byte {
	out := make([]byte, len(prompt), len(prompt)+tokens*width)
	copy(out, prompt)
	seed := xxh3.Hash(prompt)
	for i := range tokens {
		x := xxh3.HashSeed(nil, seed+uint64(i))
		for range width {
			out = append(out, byte('a'+x%26))
			x /= 26
		}
	}
	return out
}
