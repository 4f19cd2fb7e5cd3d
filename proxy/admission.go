package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/loadsync"
)

// Admission is what the door admits requests with (see the admission
// package): vllm-router's bounds, and the classes, tenants and saturation
// signal that decide the order within them. The zero value admits
// everything at once.
type Admission struct {
	// Capacity bounds the requests in flight and is the burst of the rate
	// bucket (--max-concurrent-requests, default 32768); 0: neither bound.
	Capacity int
	// RefillPerSec refills the bucket (--rate-limit-tokens-per-second);
	// 0: Capacity per second.
	RefillPerSec float64
	QueueSize    int           // --queue-size, default 100; 0: no queue
	QueueTimeout time.Duration // --queue-timeout-secs, default 60 s

	// Classes, highest first (--priority-classes); empty: one class, and
	// priority headers are ignored.
	Classes []string
	// DefaultClass is the class of a request that names none
	// (--priority-default-class).
	DefaultClass string
	// Reserved are the slots per class that lower classes may not take
	// (--priority-reserved).
	Reserved map[string]int
	// EnginePriority says the engines run vLLM's priority scheduling
	// (--engine-priority): a request's class goes on to the engine as its
	// body's priority field (the class's rank, 0 the highest: vLLM serves
	// lower first), replacing any the client sent, on every route whose body
	// an engine reads one from (enginepriority.go). Off: the body goes
	// unchanged.
	EnginePriority bool
	// LendReserved lets lower classes borrow the reserved slots a class
	// leaves unused (--lend-reserved-slots), which the class takes back
	// over the engines' limit. It pays only where the engine preempts a
	// running request for a higher-priority waiting one: vLLM v1 does not,
	// and there the class waits first in the engine's queue for the next
	// slot a borrower frees (BENCHMARKS.md: 70x the interactive TTFT p99).
	// Off: a reserved slot stays idle while its class is.
	LendReserved bool
	// KeyClasses gives, per API key, the class of its requests
	// (--api-key-classes): the class of those that name none, and the
	// highest any of them gets. A key without one is held to DefaultClass.
	// Needs APIKeys: a key the router does not check proves nothing.
	KeyClasses map[string]string
	// KeyTenants gives, per API key, the tenants it speaks for, its own
	// first (--api-key-tenants KEY=tenant, repeatable): several keys may
	// share a tenant, and a key may name one of its tenants in
	// TenantHeader. Without an entry a key's tenant is the key itself (a
	// digest of it: the key never appears). Needs APIKeys.
	KeyTenants map[string][]string
	// TenantHeader names the header that says a request's tenant
	// (--tenant-header). Without API keys it is taken as sent; with them a
	// key may name only a tenant of KeyTenants' (403 otherwise). A request
	// without it is its key's first tenant, else "anonymous".
	TenantHeader string
	// TenantMaxInFlight is one tenant's ceiling (--tenant-max-inflight).
	TenantMaxInFlight int
	// TierFair makes the peers' queue reports count (--tier-fairness).
	TierFair bool
	// MaxTenantBytes bounds the admission's tenant tables, in bytes; past
	// it new tenants share admission.OverflowTenant. Default
	// admission.DefaultMaxTenantBytes.
	MaxTenantBytes int64
	// KVFull is the KV cache usage at which an engine counts as full
	// (--saturation-kv-usage, default 0.95).
	KVFull float64
}

// Scheduler returns the admission package's config of a: what the door's
// Scheduler is built with.
func (a Admission) Scheduler() admission.Config {
	c := admission.Config{Classes: a.Classes, Default: a.DefaultClass, Reserved: a.Reserved, MaxInFlight: a.Capacity,
		QueueSize: a.QueueSize, QueueTimeout: a.QueueTimeout, TenantMaxInFlight: a.TenantMaxInFlight, TierFair: a.TierFair,
		Lend: a.LendReserved, MaxTenantBytes: a.MaxTenantBytes}
	if a.Capacity > 0 {
		c.RatePerSec, c.Burst = a.RefillPerSec, a.Capacity
		if c.RatePerSec <= 0 {
			c.RatePerSec = float64(a.Capacity)
		}
	}
	return c
}

// Validate refuses settings out of range, naming the flag.
func (a Admission) Validate() error {
	if err := a.Scheduler().Validate(); err != nil {
		return err
	}
	cl := admission.NewClasses(a.Scheduler())
	for _, name := range a.KeyClasses {
		if _, err := cl.Parse(name); err != nil || !cl.Enabled() {
			return errors.New("--api-key-classes: " + name + " is not one of --priority-classes")
		}
	}
	if a.TenantHeader != "" && !validHeaderName(a.TenantHeader) {
		return errors.New("--tenant-header: " + a.TenantHeader + " is not a header name")
	}
	return validKeyTenants(a.KeyTenants)
}

// ValidateKeyed refuses what needs --api-keys without them (keys, the
// keys the API takes): a class or a tenant given to a key the router does
// not check would be anyone's for the asking. With keys, a tenant header
// counts only for the tenants --api-key-tenants gives keys, so a header
// without any is refused too.
func (a Admission) ValidateKeyed(keys []string) error {
	switch {
	case len(keys) == 0 && len(a.KeyClasses) > 0:
		return errors.New("--api-key-classes: needs --api-keys (a key the router does not check proves nothing)")
	case len(keys) == 0 && len(a.KeyTenants) > 0:
		return errors.New("--api-key-tenants: needs --api-keys (a key the router does not check proves nothing)")
	case len(keys) > 0 && a.TenantHeader != "" && len(a.KeyTenants) == 0:
		return errors.New("--tenant-header: with --api-keys a request's tenant is its key's, and the header names only a tenant --api-key-tenants gives the key; give some, or drop the header")
	}
	return nil
}

func validHeaderName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return s != ""
}

// errQueueTimeout: a request waited --queue-timeout-secs in the admission
// queue.
var errQueueTimeout = errors.New("timed out in the admission queue")

// priorityHeaders carry a request's class, ours first, then the spellings
// of SGLang's gateway and of Dynamo.
var priorityHeaders = []string{"x-priority", "x-smg-priority", "x-dynamo-request-priority"}

// expectedOutputTokens is what a request is expected to generate, for its
// cost: the door decides before reading the body, so max_tokens is not
// known yet.
const expectedOutputTokens = 256

// costOf is the cost in tokens of a request whose body is n bytes: about
// four bytes a prompt token, and the output expected.
func costOf(n int) int64 { return int64(n)/4 + expectedOutputTokens }

// admitter admits the proxy's requests through the replica's door
// (core.Door).
type admitter struct {
	door     *core.Door
	s        *admission.Scheduler // the door's
	classes  admission.Classes
	timeout  time.Duration
	keyClass map[credential.ID]admission.Class
	tenants  keyTenants
	metrics  *admissionMetrics
	watcher  *watcher // looks at the clients of queued requests
	// stamp: pass the class on as the engine's priority field
	// (EnginePriority, with classes enabled)
	stamp bool
}

func newAdmitter(a Admission, m *admissionMetrics, w *watcher) *admitter {
	door := core.NewDoor(a.Scheduler(), a.KVFull, time.Now)
	s := door.Scheduler()
	if a.QueueTimeout <= 0 {
		a.QueueTimeout = DefaultConfig().Admission.QueueTimeout
	}
	d := &admitter{door: door, s: s, classes: s.Classes(), timeout: a.QueueTimeout, keyClass: map[credential.ID]admission.Class{},
		tenants: newKeyTenants(a.TenantHeader, a.KeyTenants), metrics: m, watcher: w,
		stamp: a.EnginePriority && s.Classes().Enabled()}
	for key, name := range a.KeyClasses {
		if c, err := d.classes.Parse(name); err == nil {
			d.keyClass[credential.IDOf([]byte(key))] = c
		}
	}
	m.watch(s)
	return d
}

// requestOf reads a request's class, tenant and cost from its headers and
// its caller. A class that is not one of ours, a negative rank or a tenant
// header that is too long or not printable is a 400; a tenant the caller's
// key may not name is a 403 (tenants.go).
func (d *admitter) requestOf(h *fasthttp.RequestHeader, who *caller) (admission.Request, error) {
	req := admission.Request{Cost: costOf(max(h.ContentLength(), 0))}
	var err error
	if req.Class, err = d.classOf(h, who); err != nil {
		return req, err
	}
	req.Tenant, err = d.tenantOf(h, who)
	return req, err
}

// classOf is the class a request gets. With --api-keys a key's class
// (--api-key-classes, else the default class) is the highest its requests
// may have: a priority header may ask for a lower one, and one that asks
// for a higher one gets the key's. Without keys a caller is nobody in
// particular, and a header is taken as sent.
func (d *admitter) classOf(h *fasthttp.RequestHeader, who *caller) (admission.Class, error) {
	ceiling := d.classes.Default()
	if c, ok := d.keyClass[who.id]; ok && who.verified {
		ceiling = c
	}
	asked, ok, err := d.askedClass(h)
	switch {
	case err != nil || !ok:
		return ceiling, err
	case who.verified && asked < ceiling: // a lower rank is a higher class
		return ceiling, nil
	}
	return asked, nil
}

// askedClass is the class the request's priority headers name, the first
// of them that is set; ok is false when none is.
func (d *admitter) askedClass(h *fasthttp.RequestHeader) (c admission.Class, ok bool, err error) {
	for _, name := range priorityHeaders {
		if v := h.Peek(name); len(v) > 0 {
			c, err := d.classes.Parse(string(v))
			if err != nil {
				return 0, false, errorf(ErrBadRequest, "%s: %v", name, err)
			}
			return c, true, nil
		}
	}
	return 0, false, nil
}

// admit decides rc's admission from its headers, waiting in the queue for
// at most --queue-timeout-secs: the admitted request's ticket, or the error
// to answer with (400 for a class or tenant it cannot read, 429 when the
// queue is full or the request was shed for a higher class, 408 after the
// timeout, each naming the class, the tenant and what held it). The
// ticket's slot is released by release (the exchange's finish).
func (d *admitter) admit(ctx context.Context, rc *fasthttp.RequestCtx, who *caller) (*admission.Ticket, error) {
	req, err := d.requestOf(&rc.Request.Header, who)
	if err != nil {
		return nil, err
	}
	tk := d.s.Arrive(req, time.Now())
	select {
	case <-tk.Ready():
	default:
		if !d.wait(ctx, rc, tk) {
			d.metrics.decided(d.classes.Name(req.Class), tk.Request().Tenant, tk)
			if tk.Err() == nil {
				d.s.Done(tk, time.Now())
			}
			return nil, errorf(ErrNoWorker, "the replica is shutting down")
		}
	}
	d.metrics.decided(d.classes.Name(req.Class), tk.Request().Tenant, tk)
	setQueueTime(&rc.Response.Header, tk)
	var r *admission.Refusal
	switch err := tk.Err(); {
	case err == nil:
		return tk, nil
	case errors.As(err, &r) && r.Reason == admission.TimedOut:
		return nil, errorf(errQueueTimeout, "%v after %v (--queue-timeout-secs)", err, d.timeout)
	case errors.As(err, &r) && r.Reason == admission.Shed:
		return nil, errorf(ErrTooManyRequests, "%v", err)
	case errors.As(err, &r) && r.Reason == admission.ClientGone:
		return nil, errorf(ErrClientGone, "%v", err)
	default:
		return nil, errorf(ErrTooManyRequests, "%v (--queue-size %d)", err, d.s.Stats().QueueSize)
	}
}

// setQueueTime tells the client how long its request waited for
// admission, in x-admission-queue-ms.
func setQueueTime(h *fasthttp.ResponseHeader, tk *admission.Ticket) {
	if tk != nil {
		h.Set("x-admission-queue-ms", strconv.FormatInt(tk.Waited().Milliseconds(), 10))
	}
}

// wait holds a queued ticket until it is decided, its timeout passes or
// its client leaves, and reports false when the proxy shut down meanwhile.
// The client is watched by the proxy's watcher (clientwatch.go), as a
// request in flight is: a client that leaves is noticed within a look's
// interval (at most watchMaxInterval, plus a probe's interval when it
// left with a FIN), and its place in the queue goes to the next request.
func (d *admitter) wait(ctx context.Context, rc *fasthttp.RequestCtx, tk *admission.Ticket) bool {
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	if d.watcher != nil {
		q := &queuedClient{s: d.s, tk: tk}
		d.watcher.startQueued(&q.watch, rc.Conn(), requestProber(rc.Request.Header.IsHTTP11()), q, time.Now())
		defer q.watch.stop()
	}
	live := true
	select {
	case <-tk.Ready():
	case <-t.C:
		d.s.Cancel(tk, admission.TimedOut, time.Now())
	case <-ctx.Done():
		d.s.Cancel(tk, admission.TimedOut, time.Now())
		live = false
	}
	<-tk.Ready() // Cancel lost to an admission: it is admitted
	return live
}

// queuedClient is the watch on the client of a queued request: a client
// that leaves takes its ticket out of the queue.
type queuedClient struct {
	s     *admission.Scheduler
	tk    *admission.Ticket
	watch clientWatch
}

func (q *queuedClient) clientGone() { q.s.Cancel(q.tk, admission.ClientGone, time.Now()) }

// recost charges an admitted request whose body had no length for what it
// turned out to be: n bytes, as requestOf would have from a Content-Length.
func (d *admitter) recost(tk *admission.Ticket, n int) {
	if tk != nil {
		d.s.SetCost(tk, costOf(n))
	}
}

// release frees tk's slot; a ticket released already, or none, is left
// alone.
func (d *admitter) release(tk *admission.Ticket) {
	if tk != nil {
		d.s.Done(tk, time.Now())
	}
}

// run refreshes the engines' limit every core.DoorRefreshEvery until ctx
// ends. engines nil: no saturation signal, the limit stays unknown.
func (d *admitter) run(ctx context.Context, loads *affinity.LoadTable, engines func([]admission.Reading) []admission.Reading) {
	t := time.NewTicker(core.DoorRefreshEvery)
	defer t.Stop()
	var readings []admission.Reading
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if engines == nil {
			d.s.Poll(now)
			continue
		}
		readings = engines(readings[:0])
		d.door.Refresh(loads, readings, now)
	}
}

// AdmissionReport appends this replica's queue report for the tier's
// gossip (loadsync.Config.LocalQueues).
func (p *Proxy) AdmissionReport(dst []loadsync.QueueDepth) []loadsync.QueueDepth {
	return p.admission.door.LocalQueues(dst)
}

// SetAdmissionPeer takes a peer's queue report; nil forgets the peer
// (loadsync.Config.OnQueues).
func (p *Proxy) SetAdmissionPeer(origin string, depths []loadsync.QueueDepth) {
	p.admission.door.RemoteQueues(origin, depths, time.Now())
}

// AdmissionStats is the door's queue, for /ui.
func (p *Proxy) AdmissionStats() admission.Stats { return p.admission.s.Stats() }
