package cluster

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/core"
)

// The tier's placer (core/place.go) is the Raft leader: every replica
// knows it, and there is at most one at a time. A replica that knows
// nothing of a request's prefix asks the leader over the cluster port
// which worker to take; the leader decides on its own view, in which every
// other cold request of the tier is already counted, and holds that
// reservation until the asker's load report counts the request (the report
// says which of its questions it counts; core/holds.go). An asker
// that gets no answer within its bound (50 ms) (no leader, a leader cut off or
// overloaded) decides alone, as without a placer, and does not ask that
// leader again for placerQuiet.

// placePath is the cluster-port endpoint of the placer: POST a
// core.Question, answer a core placement.
const placePath = "/cluster/place"

// defaultPlaceTimeout bounds asking the placer (Config.PlacerTimeout):
// past it the asker decides alone.
const defaultPlaceTimeout = 50 * time.Millisecond

// placerQuiet is how long an asker whose placer did not answer (a timeout,
// a refused or broken connection) decides alone before it asks that
// placer again: a leader that froze or fell off the network would
// otherwise cost every cold request the whole bound until the tier elects
// another. A new leader is asked at once.
const placerQuiet = time.Second

// unanswered is a placer that did not answer, and until when it is not
// asked.
type unanswered struct {
	addr  string
	until time.Time
}

// placing is the replica's Decider with a placer: core.Replica's, with cold
// requests asked of the leader.
type placing struct {
	*core.Replica
	// isLeader says whether this replica is the Raft leader, and leader
	// is the leader's cluster-port address ("" while there is none).
	isLeader func() bool
	leader   func() string
	rpc      *link.Quick
	timeout  time.Duration // of a question
	// router is the router the proxy decides with (the prefill one under
	// disaggregation): what the placer answers a peer's question on.
	router func() *affinity.Router
	counts *placerCounts
	log    *slog.Logger // nil: no log
	// silent is the last placer that did not answer, nil when none.
	silent atomic.Pointer[unanswered]
	// heard is the last answer from a placer, nil before the first.
	heard atomic.Pointer[answered]
}

// answered is when the placer at addr last answered a question.
type answered struct {
	addr string
	at   time.Time
}

// Decide decides req as core.Replica.PlacingOf says, the leader being the
// placer.
func (p *placing) Decide(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	switch p.PlacingOf(router, req, pool, p.isLeader()) {
	case core.DecideHere:
		return p.Replica.Decide(router, req, pool)
	case core.PlaceHere:
		p.counts.placedHere.Inc()
		d, g, err := p.Place(router, req, pool)
		d.Via = core.ViaPlacer
		return d, g, err
	}
	q := p.Ask(req, pool)
	defer p.Settle(q.Seq) // after the reservation, whoever made it
	placed, err := p.ask(p.leader(), q)
	if err == nil {
		var d core.Decided
		var g *affinity.Guard
		if d, g, err = p.DecideOn(router, req, pool, placed); err == nil {
			p.counts.asked.Inc()
			d.Via = core.ViaAsked
			return d, g, nil
		}
	}
	p.counts.alone.Inc()
	if p.log != nil {
		p.log.Debug("placer: decided alone", "err", err)
	}
	d, g, err := p.Replica.Decide(router, req, pool)
	d.Via = core.ViaAlone
	return d, g, err
}

// ask puts q to the placer at addr, unless that placer did not answer
// within the last placerQuiet.
func (p *placing) ask(addr string, q core.Question) (affinity.Decision, error) {
	if addr == "" {
		return affinity.Decision{}, fmt.Errorf("no leader")
	}
	if s := p.silent.Load(); s != nil && s.addr == addr && time.Now().Before(s.until) {
		return affinity.Decision{}, fmt.Errorf("the placer at %s did not answer lately", addr)
	}
	start := time.Now()
	status, body, err := p.rpc.Post(addr, placePath, q.AppendBinary(nil), start.Add(p.timeout))
	p.counts.askTime.UpdateDuration(start)
	if err != nil {
		if !p.answeredSince(addr, start) {
			p.silent.Store(&unanswered{addr: addr, until: time.Now().Add(placerQuiet)})
		}
		return affinity.Decision{}, err
	}
	p.heard.Store(&answered{addr: addr, at: time.Now()})
	if status != http.StatusOK {
		return affinity.Decision{}, fmt.Errorf("placer answered %d", status)
	}
	return core.ParsePlacement(body)
}

// answeredSince reports whether the placer at addr answered a question
// after start: it is alive, and a question of its that timed out met a
// queue (a burst of new sessions on a loaded host), not a placer gone
// silent, so the others go on asking it. A frozen or unreachable placer
// answers none, and is not asked for placerQuiet.
func (p *placing) answeredSince(addr string, start time.Time) bool {
	h := p.heard.Load()
	return h != nil && h.addr == addr && h.at.After(start)
}

// servePlace is placePath: the placer decides a peer's cold request. A
// replica that is not the leader refuses (409), so that an asker whose
// view of the leader is stale decides alone rather than on a second view.
func (p *placing) servePlace(ctx *fasthttp.RequestCtx) {
	if !p.isLeader() {
		admin.WriteError(ctx, admin.Refusal(http.StatusConflict, "conflict_error", "not the placer: this replica is not the leader"))
		return
	}
	q, err := core.ParseQuestion(ctx.PostBody())
	if err != nil {
		admin.WriteError(ctx, admin.Refusal(http.StatusBadRequest, "invalid_request_error", err.Error()))
		return
	}
	d, err := p.Answer(p.router(), q)
	if err != nil {
		admin.WriteError(ctx, admin.Refusal(http.StatusConflict, "conflict_error", "no candidate to place on: "+err.Error()))
		return
	}
	time.AfterFunc(p.PlacementHold(), func() { p.Unhold(q.From, q.Seq) })
	p.counts.placedForPeers.Inc()
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(core.AppendPlacement(nil, d.Decision))
}

// placerCounts count the cold decisions by how they were placed.
type placerCounts struct {
	asked, placedHere, alone, placedForPeers *metrics.Counter
	// askTime is the time of every question put to the placer, answered
	// or not: what a cold request waits for its worker on a peer; connWait
	// is the part of it a question waited for a connection to the placer
	// (only questions that found no kept one idle).
	askTime, connWait *metrics.PrometheusHistogram
}

// askBuckets are the bounds of askTime, in seconds: a loopback round trip
// to the default 50 ms bound.
var askBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}

const placementsFamily = "vllm_router_cluster_placements_total"

func newPlacerCounts(set *metrics.Set) *placerCounts {
	c := func(how string) *metrics.Counter { return set.NewCounter(placementsFamily + `{how="` + how + `"}`) }
	return &placerCounts{asked: c("asked"), placedHere: c("here"), alone: c("alone"), placedForPeers: c("for_peer"),
		askTime:  set.NewPrometheusHistogramExt("vllm_router_cluster_placer_ask_seconds", askBuckets),
		connWait: set.NewPrometheusHistogramExt("vllm_router_cluster_placer_conn_wait_seconds", askBuckets)}
}
