package loadsync

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
	"time"
)

// QueueDepth is one (class, tenant) of a replica's admission queue report:
// what waits there and what it has in flight, so that every replica can
// share the engines fairly between tenants across the tier. Class and
// Tenant are the caller's codes (a class rank, a digest of the tenant's
// name), opaque here.
type QueueDepth struct {
	Class            uint8
	Tenant           uint64
	Queued, InFlight uint32
	Tokens           uint64 // the cost of its requests in flight
	// WaitedMs is how long the oldest of the queued had waited when the
	// report was made, in milliseconds; 0 from an older build.
	WaitedMs uint32
}

// MaxQueueDepths bounds one queue report: an origin sends its largest
// entries, and a report that claims more is malformed. At 8 bytes of tenant
// and a few of varints an entry, a report stays within some 300 bytes.
const MaxQueueDepths = 16

// maxQueueOrigins bounds the origins whose queue reports are held; a report
// from one more is dropped until another expires or leaves, so a stranger
// naming made-up origins grows nothing.
const maxQueueOrigins = 64

// queueWithdrawReports is how many empty reports follow the last non-empty
// one, so that peers learn at once that the queue emptied.
const queueWithdrawReports = 3

// queueReport is an origin's queue report, numbered by its own sequence.
//
// Layout after the header: origin (string), epoch, seq, count (uvarints),
// then count entries of (class byte, tenant fixed 8 bytes, queued, in
// flight, tokens uvarints), then count waits (uvarint ms each, in the
// entries' order). The waits come last so that an older build's report,
// which ends after the entries, still decodes (its waits are 0); an older
// build reading this one counts the trailing waits as a decode error and
// ignores the report.
type queueReport struct {
	origin     string
	epoch, seq uint64
	depths     []QueueDepth
}

const queueDepthMinBytes = 1 + 8 + 3

// maxQueueTokens bounds an entry's tokens, as counts are bounded.
const maxQueueTokens = 1 << 40

func appendQueueReport(b []byte, rep *queueReport) []byte {
	b = appendHeader(b, msgQueues)
	b = appendString(b, rep.origin)
	b = binary.AppendUvarint(b, rep.epoch)
	b = binary.AppendUvarint(b, rep.seq)
	b = binary.AppendUvarint(b, uint64(len(rep.depths)))
	for _, d := range rep.depths {
		b = append(b, d.Class)
		b = binary.LittleEndian.AppendUint64(b, d.Tenant)
		b = binary.AppendUvarint(b, uint64(d.Queued))
		b = binary.AppendUvarint(b, uint64(d.InFlight))
		b = binary.AppendUvarint(b, d.Tokens)
	}
	for _, d := range rep.depths {
		b = binary.AppendUvarint(b, uint64(d.WaitedMs))
	}
	return b
}

func decodeQueueReport(r *reader) (queueReport, error) {
	rep := queueReport{origin: r.str(), epoch: r.uvarint(), seq: r.uvarint()}
	n := r.count(queueDepthMinBytes)
	if r.err() == nil && n > MaxQueueDepths {
		r.fail("%d queue entries, over the %d a report may hold", n, MaxQueueDepths)
	}
	if r.err() != nil {
		return queueReport{}, r.err()
	}
	for range n {
		d := QueueDepth{Class: r.byte(), Tenant: r.fixed64(), Queued: r.uint32v(), InFlight: r.uint32v(), Tokens: r.uvarint()}
		if r.err() == nil && d.Tokens > maxQueueTokens {
			r.fail("tokens %d out of range", d.Tokens)
		}
		if r.err() != nil {
			return queueReport{}, r.err()
		}
		rep.depths = append(rep.depths, d)
	}
	if r.remaining() > 0 {
		for i := range rep.depths {
			rep.depths[i].WaitedMs = r.uint32v()
		}
	}
	return rep, r.end()
}

// queueGossip is State's share of the queue reports: its own, and the
// peers' it holds. Its own lock; it calls the Config callbacks with it
// held, so calls are ordered.
type queueGossip struct {
	mu          sync.Mutex
	local       func([]QueueDepth) []QueueDepth
	onChange    func(string, []QueueDepth)
	ttl         time.Duration
	seq         uint64
	withdrawing int
	own         []QueueDepth
	peers       map[string]*originQueues
}

type originQueues struct {
	epoch, seq uint64
	lastHeard  time.Time
}

func newQueueGossip(cfg Config) queueGossip {
	return queueGossip{local: cfg.LocalQueues, onChange: cfg.OnQueues, ttl: cfg.LoadTTL, peers: map[string]*originQueues{}}
}

// report is this tick's queue report packet, if any.
func (q *queueGossip) report(origin string, epoch uint64) [][]byte {
	if q.local == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.own = q.local(q.own[:0])
	slices.SortFunc(q.own, func(a, b QueueDepth) int {
		return cmp.Or(cmp.Compare(b.Queued, a.Queued), cmp.Compare(b.Tokens, a.Tokens))
	})
	q.own = q.own[:min(len(q.own), MaxQueueDepths)]
	switch {
	case len(q.own) > 0:
		q.withdrawing = queueWithdrawReports
	case q.withdrawing > 0:
		q.withdrawing--
	default:
		return nil
	}
	q.seq++
	return [][]byte{appendQueueReport(nil, &queueReport{origin: origin, epoch: epoch, seq: q.seq, depths: q.own})}
}

// apply merges a peer's report, newer than the last held, and hands it on.
func (q *queueGossip) apply(rep *queueReport, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expire(now)
	o := q.peers[rep.origin]
	switch {
	case o == nil && len(q.peers) >= maxQueueOrigins:
		return false
	case o == nil:
		o = &originQueues{}
		q.peers[rep.origin] = o
	case rep.epoch < o.epoch, rep.epoch == o.epoch && rep.seq <= o.seq:
		return false
	}
	o.epoch, o.seq, o.lastHeard = rep.epoch, rep.seq, now
	if q.onChange != nil {
		q.onChange(rep.origin, rep.depths)
	}
	return true
}

// expire forgets the origins not heard from for the TTL. mu held.
func (q *queueGossip) expire(now time.Time) {
	for name, o := range q.peers {
		if now.Sub(o.lastHeard) > q.ttl {
			delete(q.peers, name)
			if q.onChange != nil {
				q.onChange(name, nil)
			}
		}
	}
}

func (q *queueGossip) tick(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expire(now)
}

// forget drops origin's report at once. Its entry stays until the TTL so
// that late copies are recognised as old; a newer report brings it back.
func (q *queueGossip) forget(origin string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.peers[origin]; ok && q.onChange != nil {
		q.onChange(origin, nil)
	}
}

func (s *State) receiveQueues(r *reader, now time.Time) error {
	rep, err := decodeQueueReport(r)
	if err != nil {
		return err
	}
	if rep.origin == s.cfg.Origin {
		return nil
	}
	if !s.queues.apply(&rep, now) {
		s.stats.reportsStale.Add(1)
	}
	return nil
}
