package proxy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// Disaggregation protocols.
const (
	// PDVLLM is vLLM's sequential (NIXL-style) protocol: prefill with one
	// output token, then decode with the prefill's kv_transfer_params.
	PDVLLM = "vllm"
	// PDSGLang is SGLang's concurrent protocol: both workers at once, tied
	// by bootstrap_host, bootstrap_port and bootstrap_room.
	PDSGLang = "sglang"
)

// PD configures prefill/decode disaggregation.
type PD struct {
	Mode    string
	Prefill *affinity.Router
	Decode  *affinity.Router
}

// disaggregation runs requests across a prefill and a decode worker, as two
// legs of the request path: each has its own guard, health tracker,
// attempts and retries, and a client that leaves ends both. The decode
// worker is chosen, and its guard taken, together with the prefill one,
// before anything is sent, so that concurrent requests whose prefill is
// slow see each other's decode choices; the prefill guard is released when
// the prefill answers.
//
// It is a hook of the inference exchanges (hooks.go): it plans the leg of
// the requests of the endpoints that disaggregate, and counts how they
// ended.
type disaggregation struct {
	cfg      PD
	routing  *routing
	send     *sender
	flights  *flights        // the concurrent prefill is in flight too: shutdown aborts it
	wg       *sync.WaitGroup // the proxy's: shutdown waits for the concurrent prefill
	requests *metrics.Counter
	prefills *metrics.Counter
	decodes  *metrics.Counter
	errors   map[string]*metrics.Counter // per phase
	duration *metrics.PrometheusHistogram
}

func newDisaggregation(cfg PD, legs *routing, send *sender, flights *flights, wg *sync.WaitGroup, m *pathmetrics.Metrics) *disaggregation {
	s := m.Set()
	d := &disaggregation{cfg: cfg, routing: legs, send: send, flights: flights, wg: wg, duration: m.PDDuration,
		requests: s.NewCounter("vllm_router_pd_requests_total"),
		prefills: s.NewCounter("vllm_router_pd_prefill_requests_total"),
		decodes:  s.NewCounter("vllm_router_pd_decode_requests_total"),
		errors:   map[string]*metrics.Counter{}}
	for _, phase := range []string{RolePrefill, RoleDecode} {
		d.errors[phase] = s.NewCounter(fmt.Sprintf(`vllm_router_pd_errors_total{phase=%q}`, phase))
	}
	return d
}

// parsed gives x's routing text a copy of its own: a concurrent prefill
// may outlive the exchange, and route with the text after it is done.
func (d *disaggregation) parsed(x *exchange) error {
	x.in.Text = affinity.Text{x.in.Text.AppendTo(nil)}
	return nil
}

// planLeg plans the requests of the endpoints that disaggregate.
func (d *disaggregation) planLeg(x *exchange, dpool *affinity.Pool, key uint64) (*leg, bool, error) {
	if !x.ep.PD {
		return nil, false, nil
	}
	l, err := d.plan(x, dpool, key)
	return l, true, err
}

// finished counts a disaggregated request's duration and failure.
func (d *disaggregation) finished(x *exchange, status int, cut bool) {
	if x.pd {
		d.duration.UpdateDuration(x.start)
		d.countFailure(x, status, cut)
	}
}

// plan is the plan of a disaggregated request whose decode candidates are
// dpool, up to its decode leg, whose answer is the client's: the sequential
// protocol's prefill runs here, the concurrent one's starts here. When the
// prefill failed with an answer of its own, the client has it, and there is
// no leg.
func (d *disaggregation) plan(x *exchange, dpool *affinity.Pool, key uint64) (*leg, error) {
	d.requests.Inc()
	x.pd = true
	l, refused, err := d.planBody(x, x.body, dpool, key)
	if refused != nil {
		refused.deliver(x)
		return nil, nil
	}
	return l, err
}

// planResume plans the continuation of a disaggregated stream whose decode
// worker cut it: body, the continuation, goes through a new prefill (its
// prompt is the original one and the text so far, mostly a cache hit on the
// prefill worker that holds the conversation) to a decode worker of dpool,
// those the stream has not used. A prefill that refuses the continuation
// fails the resume: the client's stream has begun, and the refusal is not
// its answer.
func (d *disaggregation) planResume(x *exchange, body []byte, dpool *affinity.Pool, key uint64) (*leg, bool, error) {
	if !x.pd {
		return nil, false, nil
	}
	l, refused, err := d.planBody(x, body, dpool, key)
	if refused != nil {
		return nil, true, failure.Errorf(failure.ErrUpstream, "prefill worker %d answered the stream's continuation with %d",
			refused.worker, refused.status)
	}
	return l, true, err
}

// planBody runs the protocol for body up to its decode leg; refused is a
// sequential prefill's own answer when it failed with one.
func (d *disaggregation) planBody(x *exchange, body []byte, dpool *affinity.Pool, key uint64) (l *leg, refused *answer, err error) {
	ppool, err := d.routing.poolFor(x, d.routing.routers.Load().pd.Prefill, RolePrefill, x.in.Model)
	if err != nil {
		return nil, nil, err
	}
	pre, dec, err := d.legs(x, ppool, dpool, key)
	if err != nil {
		return nil, nil, err
	}
	if d.cfg.Mode == PDSGLang {
		l, err := d.concurrent(x, body, pre, dec)
		return l, nil, err
	}
	return d.sequential(x, body, pre, dec)
}

// legs chooses the prefill and the decode worker together and returns the
// two legs that start on them.
func (d *disaggregation) legs(x *exchange, ppool, dpool *affinity.Pool, key uint64) (pre, dec *leg, err error) {
	rs := d.routing.routers.Load().pd
	pre = d.routing.newLeg(x, RolePrefill, rs.Prefill, d.routing.prepare(rs.Prefill, x, key), ppool)
	dec = d.routing.newLeg(x, RoleDecode, rs.Decode, d.routing.prepare(rs.Decode, x, key), dpool)
	x.path.hooks.attach(x, pre.req, ppool) // the prefill workers' events say what is cached
	pdec, pguard, err := pre.route(ppool)
	if err != nil {
		return nil, nil, failure.Errorf(failure.ErrNoWorker, "no eligible prefill worker for model %q", x.in.Model)
	}
	ddec, dguard, err := dec.route(dpool)
	if err != nil {
		pguard.Release()
		return nil, nil, failure.Errorf(failure.ErrNoWorker, "no eligible decode worker for model %q", x.in.Model)
	}
	pre.first, dec.first = &routed{dec: pdec, guard: pguard}, &routed{dec: ddec, guard: dguard}
	return pre, dec, nil
}

// sequential is the vLLM protocol: the prefill leg of body, whose answer
// carries the kv_transfer_params, then the decode leg with them. A prefill
// that failed gives the prefill worker's own answer when there is one (a
// 4xx is the client's mistake, a 429 or 5xx what the worker said after
// every retry), else the router's error.
func (d *disaggregation) sequential(x *exchange, body []byte, pre, dec *leg) (*leg, *answer, error) {
	var err error
	if pre.body, err = prefillRequestBody(body); err != nil {
		pre.release()
		dec.release()
		return nil, nil, err
	}
	d.prefills.Inc()
	_, ans, err := d.send.try(x, pre)
	if err == nil {
		pre.judge(ans.status, usageOf(ans.body)) // the prefill engine's cache is the prefill router's to judge
	}
	if err == nil && ans.status/100 == 2 {
		dec.body, err = decodeRequestBody(body, ans.body)
	}
	if err != nil || ans.status/100 != 2 {
		dec.release() // no decode call for a request whose prefill failed or whose client left
		x.failedPhase.Store(&phasePrefill)
		if err != nil {
			return nil, nil, err
		}
		return nil, ans, nil
	}
	d.decodes.Inc()
	return dec, nil, nil
}

// concurrent is the SGLang protocol: body's prefill and decode at once, tied
// by the bootstrap fields, the decode answer to the client. A failed
// prefill aborts the decode. Neither half is retried: a retry would need a
// new bootstrap room on both.
func (d *disaggregation) concurrent(x *exchange, body []byte, pre, dec *leg) (*leg, error) {
	px, end := d.detached(x) // before the decode half uses x's request
	// The prefill worker is picked, through its circuit, before the body
	// that names it is written: a worker whose circuit refuses is replaced
	// by another, and the decode must wait for the one that runs.
	a, err := d.send.pick(px, pre)
	if err != nil {
		end()
		dec.release()
		return nil, err
	}
	body, err = bootstrapBody(body, a.m)
	if err != nil {
		a.end(Canceled, false)
		end()
		dec.release()
		return nil, err
	}
	pre.body, dec.body = body, body
	pre.attempts, dec.attempts = 1, 1
	pre.picked = a
	d.prefills.Inc()
	d.decodes.Inc()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer end()
		d.concurrentPrefill(x, px, pre)
	}()
	return dec, nil
}

// concurrentPrefill runs the prefill half of a concurrent request as px;
// when it fails, the decode half is aborted: no decode answer without its
// prefill.
func (d *disaggregation) concurrentPrefill(x, px *exchange, pre *leg) {
	_, ans, err := d.send.try(px, pre)
	switch {
	case err == nil && ans.status/100 == 2, failure.IsGone(err):
		return
	case err == nil:
		err = failure.Errorf(failure.ErrUpstream, "the prefill worker answered %d", ans.status)
	}
	x.failedPhase.Store(&phasePrefill)
	x.abort(&failure.Abort{Err: fmt.Errorf("prefill failed, decode aborted: %w", err)})
}

// detached is x as the prefill half of a concurrent request sees it: the
// client leaving ends it, the decode half ending does not (the prefill
// finishes on its own, within the request's deadline). It never touches the
// client's RequestCtx, which the prefill must not read.
func (d *disaggregation) detached(x *exchange) (px *exchange, end func()) {
	px = &exchange{path: x.path, ep: x.ep, in: x.in, id: x.id, start: x.start, deadline: x.deadline, body: x.body,
		up: fasthttp.AcquireRequest(), uri: bytes.Clone(x.uri)}
	x.up.CopyTo(px.up)
	d.flights.add(px) // shutdown aborts it
	stop := context.AfterFunc(&x.life, func() {
		if cause := x.life.why(); failure.IsGone(cause) {
			px.abort(cause)
		}
	})
	return px, func() {
		stop()
		d.flights.remove(px)
		px.life.end(nil)
		fasthttp.ReleaseRequest(px.up)
	}
}

var phasePrefill = RolePrefill

// countFailure counts, when the request finishes, the failure of a
// disaggregated request in its phase: the one that failed first, else the
// decode whose answer the client got. A client that left is no failure.
func (d *disaggregation) countFailure(x *exchange, status int, cut bool) {
	if status == statusClientGone {
		return
	}
	switch phase := x.failedPhase.Load(); {
	case phase != nil:
		d.errors[*phase].Inc()
	case cut || status >= 400:
		d.errors[RoleDecode].Inc()
	}
}

// prefillRequestBody rewrites a client body into the prefill request of the
// vLLM protocol: one output token, no streaming, remote decode requested.
func prefillRequestBody(body []byte) ([]byte, error) {
	var parser fastjson.Parser
	v, err := parser.ParseBytes(body)
	if err != nil {
		return nil, failure.Errorf(failure.ErrBadRequest, "malformed JSON body: %v", err)
	}
	var a fastjson.Arena
	v.Set("max_tokens", a.NewNumberInt(1))
	if v.Get("max_completion_tokens") != nil {
		v.Set("max_completion_tokens", a.NewNumberInt(1))
	}
	v.Set("stream", a.NewFalse())
	v.Del("stream_options")
	kv := a.NewObject()
	kv.Set("do_remote_decode", a.NewTrue())
	kv.Set("do_remote_prefill", a.NewFalse())
	for _, k := range []string{"remote_engine_id", "remote_block_ids", "remote_host", "remote_port"} {
		kv.Set(k, a.NewNull())
	}
	v.Set("kv_transfer_params", kv)
	return v.MarshalTo(nil), nil
}

// decodeRequestBody is the client's body with the kv_transfer_params the
// prefill worker returned.
func decodeRequestBody(body, prefillAnswer []byte) ([]byte, error) {
	var pa, pb fastjson.Parser
	answer, err := pa.ParseBytes(prefillAnswer)
	if err != nil {
		return nil, failure.Errorf(failure.ErrUpstream, "prefill worker answered malformed JSON: %v", err)
	}
	params := answer.Get("kv_transfer_params")
	if params == nil || params.Type() != fastjson.TypeObject {
		return nil, failure.Errorf(failure.ErrUpstream, "prefill worker answered without kv_transfer_params")
	}
	v, err := pb.ParseBytes(body)
	if err != nil {
		return nil, failure.Errorf(failure.ErrBadRequest, "malformed JSON body: %v", err)
	}
	v.Set("kv_transfer_params", params)
	return v.MarshalTo(nil), nil
}

// bootstrapBody adds the SGLang bootstrap fields that tie the two halves of
// one request together.
func bootstrapBody(body []byte, prefill *member) ([]byte, error) {
	var parser fastjson.Parser
	v, err := parser.ParseBytes(body)
	if err != nil {
		return nil, failure.Errorf(failure.ErrBadRequest, "malformed JSON body: %v", err)
	}
	var a fastjson.Arena
	v.Set("bootstrap_host", a.NewString(prefill.base.Host()))
	if prefill.BootstrapPort > 0 {
		v.Set("bootstrap_port", a.NewNumberInt(prefill.BootstrapPort))
	} else {
		v.Set("bootstrap_port", a.NewNull())
	}
	v.Set("bootstrap_room", a.NewNumberString(fmt.Sprint(rand.Int64N(1<<63-1))))
	return v.MarshalTo(nil), nil
}
