package proxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
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

// disaggregation runs requests across a prefill and a decode worker. Each
// phase holds a guard of its own: the decode guard is taken when the pair is
// chosen, before anything is sent, so that concurrent requests whose
// prefill is slow see each other's decode choices; the prefill guard is
// released when the prefill answers.
type disaggregation struct {
	p        *Proxy
	cfg      PD
	requests *metrics.Counter
	prefills *metrics.Counter
	decodes  *metrics.Counter
}

func newDisaggregation(p *Proxy, cfg PD) *disaggregation {
	s := p.deps.Metrics
	return &disaggregation{p: p, cfg: cfg,
		requests: s.NewCounter("vllm_router_pd_requests_total"),
		prefills: s.NewCounter("vllm_router_pd_prefill_requests_total"),
		decodes:  s.NewCounter("vllm_router_pd_decode_requests_total")}
}

func (d *disaggregation) failed(phase string) {
	d.p.deps.Metrics.GetOrCreateCounter(fmt.Sprintf(`vllm_router_pd_errors_total{phase=%q}`, phase)).Inc()
}

// usesSessionKey reports whether a role's policy hashes a session key.
func (d *disaggregation) usesSessionKey() bool {
	return d.cfg.Prefill.Policy().Name() == affinity.PolicyConsistentHash ||
		d.cfg.Decode.Policy().Name() == affinity.PolicyConsistentHash
}

// finalRole is the role of the worker whose answer the client gets.
func (p *Proxy) finalRole() string {
	if p.pd != nil {
		return RoleDecode
	}
	return RoleRegular
}

// serve runs one disaggregated request whose decode candidates are dpool.
func (d *disaggregation) serve(x *exchangeState, dpool *affinity.Pool, key uint64) (streaming bool) {
	d.requests.Inc()
	start := time.Now()
	defer func() {
		if !streaming {
			d.p.deps.Metrics.GetOrCreateHistogram("vllm_router_pd_request_duration_seconds").UpdateDuration(start)
		}
	}()
	ppool, err := d.p.fleet.view().pool(RolePrefill, x.in.model)
	if err != nil {
		writeError(x.ctx, err)
		return false
	}
	preq := d.cfg.Prefill.Prepare(x.in.model, x.in.text, key)
	dreq := d.cfg.Decode.Prepare(x.in.model, x.in.text, key)
	pdec, pguard, err := d.cfg.Prefill.Route(preq, ppool)
	if err != nil {
		writeError(x.ctx, errorf(ErrNoWorker, "no eligible prefill worker for model %q", x.in.model))
		return false
	}
	ddec, dguard, err := d.cfg.Decode.Route(dreq, dpool)
	if err != nil {
		pguard.Release()
		writeError(x.ctx, errorf(ErrNoWorker, "no eligible decode worker for model %q", x.in.model))
		return false
	}
	d.p.metrics.decision(pdec)
	if d.cfg.Mode == PDSGLang {
		return d.concurrent(x, pdec.Worker, pguard, &routed{dec: ddec, guard: dguard}, dreq, dpool)
	}
	return d.sequential(x, preq, ppool, &routed{dec: pdec, guard: pguard}, &routed{dec: ddec, guard: dguard}, dreq, dpool)
}

// sequential is the vLLM protocol: the prefill phase (with retries on other
// prefill workers), then the decode phase with the transfer parameters.
func (d *disaggregation) sequential(x *exchangeState, preq *affinity.Request, ppool *affinity.Pool, first, decode *routed, dreq *affinity.Request, dpool *affinity.Pool) bool {
	prefillBody, err := prefillRequestBody(x.ctx.PostBody())
	if err != nil {
		decode.guard.Release()
		first.guard.Release()
		writeError(x.ctx, err)
		return false
	}
	answer, err := d.prefill(x, preq, ppool, first, prefillBody)
	if err != nil {
		decode.guard.Release() // no decode call for a request whose prefill failed or whose client left
		d.failed("prefill")
		d.p.reportFailure(x, err)
		return false
	}
	if x.body, err = decodeRequestBody(x.ctx.PostBody(), answer); err != nil {
		decode.guard.Release()
		d.failed("prefill")
		writeError(x.ctx, err)
		return false
	}
	d.decodes.Inc()
	streaming := d.p.dispatch(x, d.cfg.Decode, dreq, dpool, decode, d.p.cfg.Retry.MaxAttempts)
	if !streaming && x.ctx.Response.StatusCode() >= 400 {
		d.failed("decode")
	}
	return streaming
}

// prefill runs the prefill phase and returns the prefill worker's answer.
func (d *disaggregation) prefill(x *exchangeState, req *affinity.Request, pool *affinity.Pool, first *routed, body []byte) ([]byte, error) {
	var tried []affinity.WorkerID
	var lastErr error
	for attempt := 0; attempt < d.p.cfg.Retry.MaxAttempts; attempt++ {
		if attempt > 0 {
			d.p.metrics.retries.Inc()
			if !d.p.backoff(x.reqCtx, attempt) {
				return nil, ErrClientGone
			}
		}
		dec, guard, err := first.take(d.cfg.Prefill, req, pool.Without(tried...))
		if err != nil {
			break
		}
		tried = append(tried, dec.Worker)
		d.prefills.Inc()
		answer, err := d.p.call(x, dec.Worker, guard, body)
		if err == nil {
			return answer, nil
		}
		if lastErr = err; errorsIsGone(err) {
			return nil, err
		}
	}
	if lastErr == nil {
		lastErr = errorf(ErrNoWorker, "no eligible prefill worker for model %q", x.in.model)
	}
	return nil, lastErr
}

// call sends body to worker w and returns its whole answer, releasing guard
// as soon as the answer is in (or the call failed). A non-2xx answer is an
// error.
func (p *Proxy) call(x *exchangeState, w affinity.WorkerID, guard *affinity.Guard, body []byte) ([]byte, error) {
	m := p.fleet.view().members[w]
	if m == nil {
		guard.Release()
		return nil, errorf(ErrNoWorker, "worker %d left the registry", w)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	p.upstreamRequest(x, m, req, body)
	return p.send(x, m, guard, req)
}

// send is call's exchange, with the request already built: it touches
// nothing of the client's RequestCtx, so it may run on its own goroutine.
func (p *Proxy) send(x *exchangeState, m *member, guard *affinity.Guard, req *fasthttp.Request) ([]byte, error) {
	defer guard.Release()
	track, err := p.deps.Health.Begin(m.ID)
	if err != nil {
		return nil, errorf(ErrNoWorker, "worker %s refused by its circuit breaker", m.URL)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	conn, err := m.up.exchange(x.reqCtx, req, resp, x.start.Add(p.cfg.RequestTimeout))
	if err != nil {
		track.End(failedOrCanceled(err))
		return nil, p.upstreamError(m, err)
	}
	answer, err := io.ReadAll(resp.BodyStream())
	_ = resp.CloseBodyStream()
	m.up.release(conn, err == nil && !resp.ConnectionClose())
	if err != nil {
		if x.reqCtx.Err() != nil {
			err = ErrClientGone
		}
		track.End(failedOrCanceled(err))
		return nil, p.upstreamError(m, err)
	}
	track.Progress(1)
	status := resp.StatusCode()
	track.End(outcomeOf(status))
	if status/100 != 2 {
		return nil, &upstreamStatus{url: m.URL, status: status, body: answer}
	}
	return answer, nil
}

// upstreamStatus is a worker's non-2xx answer, passed on to the client as is
// when no retry is left.
type upstreamStatus struct {
	url    string
	status int
	body   []byte
}

func (e *upstreamStatus) Error() string {
	return fmt.Sprintf("worker %s answered %d", e.url, e.status)
}

func (e *upstreamStatus) Unwrap() error { return ErrUpstream }

func errorsIsGone(err error) bool { return errors.Is(err, ErrClientGone) }

func asUpstreamStatus(err error, target **upstreamStatus) bool { return errors.As(err, target) }

// reportFailure answers the client after a failed phase: a worker's own
// 4xx answer is passed through (the client's mistake), anything else is an
// error of ours.
func (p *Proxy) reportFailure(x *exchangeState, err error) {
	if errorsIsGone(err) {
		x.ctx.SetConnectionClose()
		x.ctx.SetStatusCode(499)
		return
	}
	var st *upstreamStatus
	if asUpstreamStatus(err, &st) && st.status >= 400 && st.status < 500 && !retryableStatus(st.status) {
		x.ctx.SetStatusCode(st.status)
		x.ctx.SetContentType("application/json")
		x.ctx.SetBody(st.body)
		return
	}
	writeError(x.ctx, err)
}

// concurrent is the SGLang protocol: prefill and decode at once, the decode
// answer to the client; a failed prefill aborts the decode.
func (d *disaggregation) concurrent(x *exchangeState, pw affinity.WorkerID, pguard *affinity.Guard, decode *routed, dreq *affinity.Request, dpool *affinity.Pool) bool {
	m := d.p.fleet.view().members[pw]
	if m == nil {
		pguard.Release()
		decode.guard.Release()
		writeError(x.ctx, errorf(ErrNoWorker, "worker %d left the registry", pw))
		return false
	}
	body, err := bootstrapBody(x.ctx.PostBody(), m)
	if err != nil {
		pguard.Release()
		decode.guard.Release()
		writeError(x.ctx, err)
		return false
	}
	x.body = body
	d.prefills.Inc()
	d.decodes.Inc()
	req := fasthttp.AcquireRequest()
	d.p.upstreamRequest(x, m, req, body)
	d.p.wg.Add(1)
	go func() {
		defer d.p.wg.Done()
		defer fasthttp.ReleaseRequest(req)
		if _, err := d.p.send(x, m, pguard, req); err != nil && !errorsIsGone(err) {
			d.failed("prefill")
			x.abort(fmt.Errorf("prefill failed, decode aborted: %w", err)) // no decode without its prefill
		}
	}()
	return d.p.dispatch(x, d.cfg.Decode, dreq, dpool, decode, 1)
}

// prefillRequestBody rewrites a client body into the prefill request of the
// vLLM protocol: one output token, no streaming, remote decode requested.
func prefillRequestBody(body []byte) ([]byte, error) {
	var parser fastjson.Parser
	v, err := parser.ParseBytes(body)
	if err != nil {
		return nil, errorf(ErrBadRequest, "malformed JSON body: %v", err)
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
		return nil, errorf(ErrUpstream, "prefill worker answered malformed JSON: %v", err)
	}
	params := answer.Get("kv_transfer_params")
	if params == nil || params.Type() != fastjson.TypeObject {
		return nil, errorf(ErrUpstream, "prefill worker answered without kv_transfer_params")
	}
	v, err := pb.ParseBytes(body)
	if err != nil {
		return nil, errorf(ErrBadRequest, "malformed JSON body: %v", err)
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
		return nil, errorf(ErrBadRequest, "malformed JSON body: %v", err)
	}
	host, _ := hostOf(prefill.URL)
	if h, _, ok := cutLast(host, ":"); ok {
		host = h
	}
	var a fastjson.Arena
	v.Set("bootstrap_host", a.NewString(host))
	if prefill.BootstrapPort > 0 {
		v.Set("bootstrap_port", a.NewNumberInt(prefill.BootstrapPort))
	} else {
		v.Set("bootstrap_port", a.NewNull())
	}
	v.Set("bootstrap_room", a.NewNumberString(fmt.Sprint(rand.Int64N(1<<63-1))))
	return v.MarshalTo(nil), nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
