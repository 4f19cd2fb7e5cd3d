package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/core"
)

// The tier's placer (core/place.go) is the Raft leader: every replica
// knows it, and there is at most one at a time. This file drives the
// replica's side of the placement protocol (core.Placement) over the
// cluster port on the wall clock: a replica that knows nothing of a
// request's prefix puts the question to the leader, which decides on its
// own view, in which every other cold request of the tier is already
// counted, and holds that reservation until the asker's load report counts
// the request (core/holds.go). An asker that gets no answer within its
// bound (core.DefaultPlacerTimeout, core.PlacerPatience times it while the
// leader answers) (no leader, a leader cut off or
// overloaded) decides alone, as without a placer, and does not ask that
// leader again for core.PlacerQuiet; the protocol decides all of that, the
// same one fleetsim runs on virtual time.

// placePath is the cluster-port endpoint of the placer: POST a
// core.Question, answer a core placement.
const placePath = "/cluster/place"

// placing is the replica's Decider with a placer: core.Replica's, with
// cold requests through its side of the placement protocol, whose
// questions it carries to the leader.
type placing struct {
	*core.Replica
	placement *core.Placement
	rpc       *link.Quick
	// router is the router the proxy decides with (the prefill one under
	// disaggregation): what the placer answers a peer's question on.
	router func() *affinity.Router
	counts *placerCounts
	log    *slog.Logger // nil: no log
}

// Decide decides req through the placement protocol, the leader being the
// placer.
func (p *placing) Decide(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	a, d, g, err := p.placement.Begin(router, req, pool)
	if a != nil {
		d, g, err = p.put(a)
	}
	p.counts.count(d.Via)
	return d, g, err
}

// put puts a's question to its placer, within its deadline, and ends a
// with what came back: an answer, a refusal, or nothing.
func (p *placing) put(a *core.Asking) (core.Decided, *affinity.Guard, error) {
	start := time.Now()
	status, body, err := p.rpc.Post(a.To, placePath, a.Question.AppendBinary(nil), a.Deadline)
	p.counts.askTime.UpdateDuration(start)
	if err != nil {
		p.decidedAlone(err)
		return p.placement.Silent(a)
	}
	placed, err := readPlacement(status, body)
	if err != nil {
		p.decidedAlone(err)
		return p.placement.Refused(a)
	}
	return p.placement.Answered(a, placed)
}

// readPlacement reads the placer's answer.
func readPlacement(status int, body []byte) (affinity.Decision, error) {
	if status != http.StatusOK {
		return affinity.Decision{}, fmt.Errorf("placer answered %d", status)
	}
	return core.ParsePlacement(body)
}

func (p *placing) decidedAlone(err error) {
	if p.log != nil {
		p.log.Debug("placer: decided alone", "err", err)
	}
}

// servePlace is placePath: the placer decides a peer's cold request. A
// replica that is not the leader refuses (409), so that an asker whose
// view of the leader is stale decides alone rather than on a second view.
func (p *placing) servePlace(ctx *fasthttp.RequestCtx) {
	if !p.placement.IsPlacer() {
		notThePlacer(ctx)
		return
	}
	q, err := core.ParseQuestion(ctx.PostBody())
	if err != nil {
		admin.WriteError(ctx, admin.Refusal(http.StatusBadRequest, "invalid_request_error", err.Error()))
		return
	}
	placed, hold, err := p.placement.Serve(p.router(), q)
	switch {
	case errors.Is(err, core.ErrNotPlacer): // no longer the leader
		notThePlacer(ctx)
		return
	case err != nil:
		admin.WriteError(ctx, admin.Refusal(http.StatusConflict, "conflict_error", "no candidate to place on: "+err.Error()))
		return
	}
	time.AfterFunc(hold, func() { p.placement.Unhold(q) })
	p.counts.placedForPeers.Inc()
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(core.AppendPlacement(nil, placed))
}

func notThePlacer(ctx *fasthttp.RequestCtx) {
	admin.WriteError(ctx, admin.Refusal(http.StatusConflict, "conflict_error", "not the placer: this replica is not the leader"))
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

// count counts a cold decision by who placed it; one decided here is not
// cold.
func (c *placerCounts) count(via core.Via) {
	switch via {
	case core.ViaPlacer:
		c.placedHere.Inc()
	case core.ViaAsked:
		c.asked.Inc()
	case core.ViaAlone:
		c.alone.Inc()
	}
}

// askBuckets are the bounds of askTime, in seconds: a loopback round trip
// to the default 50 ms bound and its patient 150 ms (core.PlacerPatience).
var askBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15}

const placementsFamily = "vllm_router_cluster_placements_total"

func newPlacerCounts(set *metrics.Set) *placerCounts {
	c := func(how string) *metrics.Counter { return set.NewCounter(placementsFamily + `{how="` + how + `"}`) }
	return &placerCounts{asked: c("asked"), placedHere: c("here"), alone: c("alone"), placedForPeers: c("for_peer"),
		askTime:  set.NewPrometheusHistogramExt("vllm_router_cluster_placer_ask_seconds", askBuckets),
		connWait: set.NewPrometheusHistogramExt("vllm_router_cluster_placer_conn_wait_seconds", askBuckets)}
}
