package fleet

import "time"

// eventKind says what an event does when its time comes.
type eventKind uint8

const (
	// evArrival: a request arrives at the load balancer.
	evArrival eventKind = iota + 1
	// evStep: a worker's engine reaches its next state change.
	evStep
	// evDecode: a prefill answered; the request goes to its decode worker.
	evDecode
	// evTick: a replica's gossip state is due to report.
	evTick
	// evDeliver: gossip packets reach a replica.
	evDeliver
	// evSample: the routed workers' queues are due to be read.
	evSample
	// evPlace: a cold request's question reaches the placer.
	evPlace
	// evPlaced: the placer's answer reaches the asking replica.
	evPlaced
	// evSilent: a question's deadline passes without its answer.
	evSilent
	// evUnhold: the placer's reservation for a peer's request ends.
	evUnhold
	// evRefresh: a replica's door is due to set its limit.
	evRefresh
	// evScrape: a replica is due to read a worker's engine (gen: the
	// worker's index).
	evScrape
	// evAdmitted: a request its door queued is let in and is routed.
	evAdmitted
	// evQueueTimeout: a request may have waited at its door for the
	// queue timeout.
	evQueueTimeout
	// evKill: a worker dies (Config.Kills).
	evKill
	// evRetry: a request cut before its first token is due to be routed
	// again.
	evRetry
)

// event is one entry of the simulation's agenda. Only the fields its kind
// needs are set.
type event struct {
	at     time.Duration
	seq    uint64 // insertion order: ties at the same instant run first in, first out
	kind   eventKind
	target int    // worker or replica index
	gen    uint64 // evStep: the worker's schedule generation it was made for
	req    *request
	pkts   [][]byte
}

// agenda is a binary min-heap of events by (at, seq). It is written out
// rather than using container/heap so that pushing an event boxes nothing.
type agenda struct {
	events []event
	seq    uint64
}

func (q *agenda) len() int { return len(q.events) }

// push schedules e; its seq is assigned here.
func (q *agenda) push(e event) {
	q.seq++
	e.seq = q.seq
	q.events = append(q.events, e)
	q.up(len(q.events) - 1)
}

// pop removes and returns the earliest event. The agenda must not be empty.
func (q *agenda) pop() event {
	top := q.events[0]
	last := len(q.events) - 1
	q.events[0] = q.events[last]
	q.events[last] = event{} // drop references for the collector
	q.events = q.events[:last]
	if last > 0 {
		q.down(0)
	}
	return top
}

func (q *agenda) before(i, j int) bool {
	a, b := &q.events[i], &q.events[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *agenda) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.before(i, parent) {
			return
		}
		q.events[i], q.events[parent] = q.events[parent], q.events[i]
		i = parent
	}
}

func (q *agenda) down(i int) {
	n := len(q.events)
	for {
		least := i
		if l := 2*i + 1; l < n && q.before(l, least) {
			least = l
		}
		if r := 2*i + 2; r < n && q.before(r, least) {
			least = r
		}
		if least == i {
			return
		}
		q.events[i], q.events[least] = q.events[least], q.events[i]
		i = least
	}
}
