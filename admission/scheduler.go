package admission

import (
	"hash/fnv"
	"sync"
	"time"
)

// Request is what admission knows of a request: from its headers, before
// its body is read.
type Request struct {
	Class  Class
	Tenant string // "" is a tenant like any other
	// Cost is the request's tokens, prompt plus expected output (at least 1).
	Cost int64
}

// Ticket is one request's place in admission, from Arrive to Done.
type Ticket struct {
	req     Request
	t       *tenant
	arrived time.Time
	state   ticketState
	ready   chan struct{} // closed once admitted or refused; decidedAtArrival for one Arrive decided
	refusal *Refusal
	waited  time.Duration
	// tookBack: admitted over the engines' bound, taking back a reserved
	// slot a lower class borrowed (Lend).
	tookBack bool
}

type ticketState uint8

const (
	waiting ticketState = iota
	admitted
	refused
	released
)

// Ready is closed when a queued ticket is admitted or refused (Err tells
// which). It is closed already for a ticket Arrive admitted or refused.
func (tk *Ticket) Ready() <-chan struct{} { return tk.ready }

// decidedAtArrival is the Ready of every ticket Arrive admitted or refused
// at once, most of them: they share it, closed, rather than each making a
// channel that nothing waits on.
var decidedAtArrival = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// decided makes tk's Ready closed: its own channel, made when it was
// queued, or the shared one.
func (tk *Ticket) decided() {
	if tk.ready == nil {
		tk.ready = decidedAtArrival
		return
	}
	close(tk.ready)
}

// Err is nil for an admitted ticket and the *Refusal of one that was not;
// read it after Ready is closed.
func (tk *Ticket) Err() error {
	if tk.refusal == nil {
		return nil
	}
	return tk.refusal
}

// Waited is how long the ticket waited before it was admitted or refused;
// read it after Ready is closed.
func (tk *Ticket) Waited() time.Duration { return tk.waited }

// Request is what the ticket was issued for.
func (tk *Ticket) Request() Request { return tk.req }

// TookBack reports whether the ticket was admitted over the engines'
// bound, taking back a reserved slot of its class that a lower class
// borrowed: a borrower holds that slot at the engine until it ends, or is
// preempted. Read it after Ready is closed.
func (tk *Ticket) TookBack() bool { return tk.tookBack }

// Scheduler admits requests; see the package doc.
type Scheduler struct {
	mu       sync.Mutex
	cfg      SchedulerConfig
	classes  Classes
	reserved []int // per class
	bucket   bucket
	// limit is the engines' room for this replica's requests, from
	// SetLimit, after the share of the peers waiting; negative: unknown,
	// no bound. engineRoom is the room as SetLimit was given it.
	limit      int
	engineRoom int
	inflight   int
	inflightBy []int // per class
	queued     int
	queuedBy   []int // per class
	bands      []band
	// tenants holds every (class, tenant) with requests queued or in
	// flight here, and loads every tenant's in flight over its classes.
	tenants map[tenantKey]*tenant
	loads   map[string]int
	byID    map[peerKey]*tenant // tenants by their tier name
	peers   peerView
	// tenantBytes is what the tenants take of MaxTenantBytes
	// (tenantbudget.go); overflowed counts the requests that went to
	// OverflowTenant for want of it.
	tenantBytes int64
	overflowed  uint64
}

type tenantKey struct {
	class Class
	name  string
}

// New builds a Scheduler from a valid SchedulerConfig.
func New(cfg SchedulerConfig) *Scheduler {
	cfg = cfg.withDefaults()
	cl := NewClasses(cfg)
	s := &Scheduler{cfg: cfg, classes: cl, reserved: make([]int, cl.Len()), bucket: newBucket(cfg.RatePerSec, cfg.Burst),
		limit: -1, engineRoom: -1, inflightBy: make([]int, cl.Len()), queuedBy: make([]int, cl.Len()), bands: make([]band, cl.Len()),
		tenants: map[tenantKey]*tenant{}, loads: map[string]int{}, byID: map[peerKey]*tenant{}, peers: newPeerView()}
	for name, n := range cfg.Reserved {
		for i, c := range cfg.Classes {
			if c == name {
				s.reserved[i] = n
			}
		}
	}
	return s
}

// Classes is the resolver of the Scheduler's classes.
func (s *Scheduler) Classes() Classes { return s.classes }

// Arrive issues the ticket of a request arriving at now. It is admitted at
// once when nothing of its class or above waits and there is room, queued
// otherwise, or refused when the queue is full and holds nothing of a lower
// class to shed for it.
func (s *Scheduler) Arrive(req Request, now time.Time) *Ticket {
	req.Cost = max(req.Cost, 1)
	if int(req.Class) >= len(s.bands) {
		req.Class = s.classes.def
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Tenant = s.admitTenant(req)
	t := s.tenantOf(req)
	tk := &Ticket{req: req, t: t, arrived: now}
	if s.waitingAbove(req.Class) == 0 && s.hold(t, req.Cost, now, now) == HeldByNothing {
		s.admit(tk, now)
		return tk
	}
	if s.queued >= s.cfg.QueueSize && !s.shedBelow(req.Class, now) {
		s.refuse(tk, QueueFull, now)
		s.dropIfIdle(t)
		return tk
	}
	tk.ready = make(chan struct{}) // a queued ticket is waited on
	s.enqueue(tk, false)
	s.dispatch(now)
	return tk
}

// Cancel takes a queued ticket out of the queue, refused for reason (the
// caller's timeout or its client leaving), and reports true; it reports
// false for a ticket already admitted or refused, which the caller then
// owns as before.
func (s *Scheduler) Cancel(tk *Ticket, reason Reason, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.state != waiting {
		return false
	}
	s.unqueue(tk)
	s.refuse(tk, reason, now)
	s.dropIfIdle(tk.t)
	s.dispatch(now)
	return true
}

// Done ends an admitted ticket: its slot goes to the next request. Calls
// after the first, and on a ticket not admitted, do nothing.
func (s *Scheduler) Done(tk *Ticket, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.state != admitted {
		return
	}
	tk.state = released
	s.unadmit(tk)
	s.dropIfIdle(tk.t)
	s.dispatch(now)
}

// Suspend takes an admitted ticket's slot back and queues the ticket
// again, first of its tenant's: its request was preempted mid-stream and
// waits to resume, ahead of the requests that have not begun. It reports
// false, and does nothing, for a ticket not admitted. Ready is a new
// channel, closed when the ticket is admitted again or refused (Cancel).
func (s *Scheduler) Suspend(tk *Ticket, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.state != admitted {
		return false
	}
	s.unadmit(tk)
	tk.state, tk.ready, tk.tookBack = waiting, make(chan struct{}), false
	s.enqueue(tk, true)
	s.dispatch(now)
	return true
}

// SetCost corrects an admitted ticket's cost to what its request turned out
// to be (a body without a length, charged the least at arrival): its
// tenant's tokens in flight, which fairness weighs, follow. A ticket not
// admitted, or released, is left alone.
func (s *Scheduler) SetCost(tk *Ticket, cost int64) {
	cost = max(cost, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.state != admitted {
		return
	}
	tk.t.tokens += cost - tk.req.Cost
	tk.req.Cost = cost
}

// SetLimit sets how many requests this replica may have in flight by the
// engines' account (see Capacity.Limit): the engines' bounds less what the
// peers run on them; negative: no bound. The room left is shared with the
// peers that report requests waiting: this replica takes its share of it
// (rounded up) until the next SetLimit, since the peers, seeing the same
// room, take theirs at the same time and each learns of the others' only
// from their next report. Requests it lets go are admitted at once.
func (s *Scheduler) SetLimit(n int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.engineRoom = n, n
	if free := n - s.inflight; n >= 0 && free > 0 {
		competing := 1 + s.peers.waitingOrigins()
		s.limit = s.inflight + (free+competing-1)/competing
	}
	s.dispatch(now)
}

// Poll admits what time alone lets go (the rate bucket refilling); call it
// now and then while requests wait.
func (s *Scheduler) Poll(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatch(now)
}

func (s *Scheduler) tenantOf(req Request) *tenant {
	k := tenantKey{req.Class, req.Tenant}
	t := s.tenants[k]
	if t == nil {
		t = &tenant{key: k, id: TenantID(req.Tenant)}
		s.tenants[k] = t
		s.byID[peerKey{k.class, t.id}] = t
		s.tenantBytes += namedTenantBytes(k.name)
	}
	return t
}

// TenantID is the tenant's name as the tier knows it: a hash, so that an
// API key never leaves the replica.
func TenantID(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

func (s *Scheduler) dropIfIdle(t *tenant) {
	if t.inflight == 0 && len(t.queue) == 0 {
		delete(s.tenants, t.key)
		delete(s.byID, peerKey{t.key.class, t.id})
		s.tenantBytes -= namedTenantBytes(t.key.name)
	}
}

// enqueue queues tk last of its tenant's, or first: a suspended ticket
// goes ahead of those that have not begun.
func (s *Scheduler) enqueue(tk *Ticket, first bool) {
	c := tk.req.Class
	if first {
		tk.t.queue = append([]*Ticket{tk}, tk.t.queue...)
	} else {
		tk.t.queue = append(tk.t.queue, tk)
	}
	s.queued++
	s.queuedBy[c]++
	s.bands[c].join(tk.t)
}

func (s *Scheduler) unqueue(tk *Ticket) {
	t := tk.t
	for i, q := range t.queue {
		if q == tk {
			t.queue = append(t.queue[:i], t.queue[i+1:]...)
			break
		}
	}
	s.queued--
	s.queuedBy[tk.req.Class]--
	if len(t.queue) == 0 {
		s.bands[t.key.class].leave(t)
	}
}

func (s *Scheduler) admit(tk *Ticket, now time.Time) {
	t := tk.t
	s.bucket.take()
	room := s.room()
	tk.tookBack = s.cfg.Lend && room >= 0 && s.inflight >= room
	tk.state, tk.waited = admitted, now.Sub(tk.arrived)
	s.inflight++
	s.inflightBy[t.key.class]++
	t.inflight++
	t.tokens += tk.req.Cost
	s.loads[t.key.name]++
	tk.decided()
}

// unadmit gives back the slot admit took.
func (s *Scheduler) unadmit(tk *Ticket) {
	t := tk.t
	s.inflight--
	s.inflightBy[t.key.class]--
	t.inflight--
	t.tokens -= tk.req.Cost
	if s.loads[t.key.name]--; s.loads[t.key.name] <= 0 {
		delete(s.loads, t.key.name)
	}
}

func (s *Scheduler) refuse(tk *Ticket, reason Reason, now time.Time) {
	tk.state, tk.waited = refused, now.Sub(tk.arrived)
	tk.refusal = &Refusal{Reason: reason, Hold: s.hold(tk.t, tk.req.Cost, tk.arrived, now), Class: s.classes.Name(tk.req.Class),
		Tenant: tk.req.Tenant}
	tk.decided()
}

// waitingAbove counts the requests queued in class c or above.
func (s *Scheduler) waitingAbove(c Class) int {
	n := 0
	for k := 0; k <= int(c); k++ {
		n += s.queuedBy[k]
	}
	return n
}

// shedBelow refuses the newest request of the lowest class below c that
// has any queued, from its tenant with the most queued, to make room for
// one of class c; false when there is none.
func (s *Scheduler) shedBelow(c Class, now time.Time) bool {
	for k := len(s.bands) - 1; k > int(c); k-- {
		if t := s.bands[k].longest(); t != nil {
			tk := t.queue[len(t.queue)-1]
			s.unqueue(tk)
			s.refuse(tk, Shed, now)
			tk.refusal.Hold = HeldByClass
			s.dropIfIdle(t)
			return true
		}
	}
	return false
}

// dispatch admits queued requests while there is room: the highest class
// first, tenants of a class by deficit round robin.
func (s *Scheduler) dispatch(now time.Time) {
	for s.queued > 0 {
		t := s.pick(now)
		if t == nil {
			return
		}
		tk := t.queue[0]
		s.unqueue(tk)
		t.deficit -= tk.req.Cost
		s.admit(tk, now)
	}
}

// pick chooses the tenant whose head request goes next, or nil: the
// highest class that the class rules let go, and in it the next tenant by
// deficit round robin whose head request the tenant rules let go.
func (s *Scheduler) pick(now time.Time) *tenant {
	for c := range s.bands {
		if s.queuedBy[c] == 0 {
			continue
		}
		class := turn{class: Class(c), now: now}
		if s.holdBy(classRules, class) != HeldByNothing {
			continue // a lower class may still take back what it lent
		}
		class.share = s.waitingMin(Class(c))
		if t := s.bands[c].pick(s.cfg.Quantum, func(t *tenant) bool {
			head := class
			head.t, head.cost, head.arrived = t, t.queue[0].req.Cost, t.queue[0].arrived
			return s.holdBy(tenantRules, head) == HeldByNothing
		}); t != nil {
			return t
		}
	}
	return nil
}
