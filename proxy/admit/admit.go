package admit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/identity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// priorityHeaders carry a request's class, ours first, then the spellings
// of SGLang's gateway and of Dynamo.
var priorityHeaders = []string{"x-priority", "x-smg-priority", "x-dynamo-request-priority"}

// Admitter admits the proxy's requests through the replica's door
// (core.Door): it reads a request's class and tenant from its headers and
// its caller, waits for its ticket while its client stays, and ticks the
// door on the wall clock.
type Admitter struct {
	door     *core.Door
	classes  admission.Classes
	keyClass map[credential.ID]admission.Class
	tenants  identity.Tenants
	metrics  *pathmetrics.Admission
	watcher  QueueWatch // looks at the clients of queued requests; nil: none
	// stamp: pass the class on as the engine's priority field
	// (EnginePriority, with classes enabled)
	stamp bool
	// preempts: a request that takes its slot back has a borrower give way
	// (PreemptByResume, with classes enabled)
	preempts bool
}

// QueueWatch looks at the client of a queued request, as the proxy looks
// at the clients of requests in flight.
type QueueWatch interface {
	// WatchQueued starts a watch on rc's client that calls gone when the
	// client leaves; stop ends it.
	WatchQueued(rc *fasthttp.RequestCtx, gone func()) (stop func())
}

// New builds the door of a over loads, reading the engines' saturation
// signal from engines (nil: none); w watches the clients of queued
// requests (nil: none).
func New(a admission.Config, loads *affinity.LoadTable, engines func([]admission.Reading) []admission.Reading,
	m *pathmetrics.Admission, w QueueWatch) (*Admitter, error) {
	door, err := core.NewDoor(core.DoorConfig{Admission: a, Clock: clock.RealClock{}, Loads: loads, Readings: engines})
	if err != nil {
		return nil, err
	}
	classes := door.Scheduler().Classes()
	d := &Admitter{door: door, classes: classes, keyClass: map[credential.ID]admission.Class{},
		tenants: identity.NewTenants(a.TenantHeader, a.KeyTenants), metrics: m, watcher: w,
		stamp: a.EnginePriority && classes.Enabled(), preempts: a.PreemptByResume && classes.Enabled()}
	for key, name := range a.KeyClasses {
		if c, err := d.classes.Parse(name); err == nil {
			d.keyClass[credential.IDOf([]byte(key))] = c
		}
	}
	m.Watch(door.Scheduler())
	return d, nil
}

// requestOf reads a request's class and tenant from its headers and its
// caller (the door charges its cost). A class that is not one of ours, a
// negative rank or a tenant header that is too long or not printable is a
// 400; a tenant the caller's key may not name is a 403 (identity.Tenants).
func (d *Admitter) requestOf(h *fasthttp.RequestHeader, who *identity.Caller) (admission.Class, string, error) {
	class, err := d.classOf(h, who)
	if err != nil {
		return class, "", err
	}
	tenant, err := d.tenants.Of(h, who)
	return class, tenant, err
}

// classOf is the class a request gets. With --api-keys a key's class
// (--api-key-classes, else the default class) is the highest its requests
// may have: a priority header may ask for a lower one, and one that asks
// for a higher one gets the key's. Without keys a caller is nobody in
// particular, and a header is taken as sent.
func (d *Admitter) classOf(h *fasthttp.RequestHeader, who *identity.Caller) (admission.Class, error) {
	ceiling := d.classes.Default()
	if c, ok := d.keyClass[who.ID]; ok && who.Verified {
		ceiling = c
	}
	asked, ok, err := d.askedClass(h)
	switch {
	case err != nil || !ok:
		return ceiling, err
	case who.Verified && asked < ceiling: // a lower rank is a higher class
		return ceiling, nil
	}
	return asked, nil
}

// askedClass is the class the request's priority headers name, the first
// of them that is set; ok is false when none is.
func (d *Admitter) askedClass(h *fasthttp.RequestHeader) (c admission.Class, ok bool, err error) {
	for _, name := range priorityHeaders {
		if v := h.Peek(name); len(v) > 0 {
			c, err := d.classes.Parse(string(v))
			if err != nil {
				return 0, false, failure.Errorf(failure.ErrBadRequest, "%s: %v", name, err)
			}
			return c, true, nil
		}
	}
	return 0, false, nil
}

// Admit decides rc's admission from its headers, waiting in the queue for
// at most --queue-timeout-secs: the admitted request's ticket, or the error
// to answer with (400 for a class or tenant it cannot read, 429 when the
// queue is full or the request was shed for a higher class, 408 after the
// timeout, each naming the class, the tenant and what held it). The
// ticket's slot is released by Release (the exchange's finish).
func (d *Admitter) Admit(ctx context.Context, rc *fasthttp.RequestCtx, who *identity.Caller) (*admission.Ticket, error) {
	class, tenant, err := d.requestOf(&rc.Request.Header, who)
	if err != nil {
		return nil, err
	}
	tk := d.door.Arrive(class, tenant, max(rc.Request.Header.ContentLength(), 0))
	select {
	case <-tk.Ready():
	default:
		if !d.wait(ctx, rc, tk) {
			d.metrics.Decided(d.classes.Name(class), tk.Request().Tenant, tk)
			if tk.Err() == nil {
				d.door.Done(tk)
			}
			return nil, failure.Errorf(failure.ErrNoWorker, "the replica is shutting down")
		}
	}
	d.metrics.Decided(d.classes.Name(class), tk.Request().Tenant, tk)
	SetQueueTime(&rc.Response.Header, tk)
	var r *admission.Refusal
	switch err := tk.Err(); {
	case err == nil:
		return tk, nil
	case errors.As(err, &r) && r.Reason == admission.TimedOut:
		return nil, failure.Errorf(failure.ErrQueueTimeout, "%v after %v (--queue-timeout-secs)", err, d.door.Timeout())
	case errors.As(err, &r) && r.Reason == admission.Shed:
		return nil, failure.Errorf(failure.ErrTooManyRequests, "%v", err)
	case errors.As(err, &r) && r.Reason == admission.ClientGone:
		return nil, failure.Errorf(failure.ErrClientGone, "%v", err)
	default:
		return nil, failure.Errorf(failure.ErrTooManyRequests, "%v (--queue-size %d)", err, d.door.Scheduler().Stats().QueueSize)
	}
}

// SetQueueTime tells the client how long its request waited for
// admission, in x-admission-queue-ms.
func SetQueueTime(h *fasthttp.ResponseHeader, tk *admission.Ticket) {
	if tk != nil {
		h.Set("x-admission-queue-ms", strconv.FormatInt(tk.Waited().Milliseconds(), 10))
	}
}

// wait holds a queued ticket until it is decided, its timeout passes or
// its client leaves, and reports false when the proxy shut down meanwhile.
// The client is watched by the proxy's watcher (QueueWatch), as a request
// in flight is: a client that leaves is noticed within a look's interval,
// and its place in the queue goes to the next request.
func (d *Admitter) wait(ctx context.Context, rc *fasthttp.RequestCtx, tk *admission.Ticket) bool {
	t := time.NewTimer(d.door.Timeout())
	defer t.Stop()
	if d.watcher != nil {
		stop := d.watcher.WatchQueued(rc, func() { d.door.Cancel(tk, admission.ClientGone) })
		defer stop()
	}
	live := true
	select {
	case <-tk.Ready():
	case <-t.C:
		d.door.Cancel(tk, admission.TimedOut)
	case <-ctx.Done():
		d.door.Cancel(tk, admission.TimedOut)
		live = false
	}
	<-tk.Ready() // Cancel lost to an admission: it is admitted
	return live
}

// Readmit gives the slot tk of a stream that gives way (a preemption)
// back to the door and waits, first of its tenant, until it is admitted
// again: an error when its client leaves or the replica shuts down (life
// ends, and why says which), or its deadline passes meanwhile, the ticket
// then refused (Done gives nothing back twice).
func (d *Admitter) Readmit(tk *admission.Ticket, deadline time.Time, life context.Context, why func() error) error {
	if tk == nil || !d.door.Suspend(tk) {
		return nil
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var err error
	reason := admission.ClientGone
	select {
	case <-tk.Ready():
	case <-t.C:
		err, reason = failure.Errorf(failure.ErrUpstreamTimeout, "the request's deadline passed while its preempted stream waited to resume"), admission.TimedOut
	case <-life.Done(): // its client left, or the replica shuts down
		err = why()
	}
	if err != nil && d.door.Cancel(tk, reason) {
		return err
	}
	<-tk.Ready() // a Cancel that lost to an admission: it is admitted
	return tk.Err()
}

// Recost charges an admitted request whose body had no length for what it
// turned out to be: n bytes, as the door would have from a Content-Length.
func (d *Admitter) Recost(tk *admission.Ticket, n int) {
	if tk != nil {
		d.door.Recost(tk, n)
	}
}

// Release frees tk's slot; a ticket released already, or none, is left
// alone.
func (d *Admitter) Release(tk *admission.Ticket) {
	if tk != nil {
		d.door.Done(tk)
	}
}

// Run ticks the door every core.DoorRefreshEvery until ctx ends.
func (d *Admitter) Run(ctx context.Context) {
	t := time.NewTicker(core.DoorRefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.door.Tick()
		}
	}
}

// Door is the replica's admission door.
func (d *Admitter) Door() *core.Door { return d.door }

// StampsPriority reports whether an admitted request's class goes on to
// the engine as its priority field (EnginePriority, with classes enabled).
func (d *Admitter) StampsPriority() bool { return d.stamp }

// Preempts reports whether a request that takes its slot back has a
// borrower give way (PreemptByResume, with classes enabled).
func (d *Admitter) Preempts() bool { return d.preempts }
