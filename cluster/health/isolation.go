package health

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A replica that loses its own network sees every worker fail at once, and
// every peer go quiet with them. Counted against the workers, those failures
// took every worker out, and the replica answered 503 until its next probes
// had passed, seconds after its network came back. As with a stall, what it
// sees while it hears neither a peer nor a worker says nothing about the
// workers: such failures are not counted, the replica says it is cut off
// (readiness), and it probes every worker again the moment a peer or a
// worker is heard from.

// PeerContact says how long this replica has been out of touch with all of
// its peers: 0 while any of them is heard from (their load reports over the
// gossip, which come several times a second), and from the moment their
// silence outlasted what a live peer never stays silent for, the time since
// then. expected is false when it has no peers to hear from (a lone
// replica, or one whose peers all left). It is called from probe goroutines
// and, every EvalInterval, from the evaluation loop: safe for concurrent
// use, and cheap.
type PeerContact func() (silent time.Duration, expected bool)

// isolation is what the Monitor knows of this replica's contact with the
// world: the latest window in which it heard no peer, on the Monitor's
// timeline, and whether it is the one cut off. Its atomics are lock-free;
// mu guards the window.
type isolation struct {
	interval int64 // between active checks: Config.Interval
	log      *slog.Logger

	peers      atomic.Pointer[PeerContact]
	lastAnswer atomic.Int64 // when a worker last answered a probe, or notSet
	// round counts CheckNow's rounds; answeredRound is the latest in which
	// a worker answered.
	round, answeredRound atomic.Uint64
	cutOff               atomic.Bool // a failure was not counted because of it, and nothing was heard since
	recheck              chan struct{}

	mu     sync.Mutex
	goneAt int64 // when the peers went quiet, or notSet
	backAt int64 // when one was heard again, or notSet while they are quiet
}

func newIsolation(interval time.Duration, log *slog.Logger) *isolation {
	i := &isolation{interval: interval.Nanoseconds(), log: log, recheck: make(chan struct{}, 1), goneAt: notSet, backAt: notSet}
	i.lastAnswer.Store(notSet)
	return i
}

// observe asks after the peers at now and updates the window; it returns
// the window, with back notSet while the peers are quiet.
func (i *isolation) observe(now int64) (gone, back int64, ok bool) {
	f := i.peers.Load()
	if f == nil {
		return notSet, notSet, false
	}
	silent, expected := (*f)()
	i.mu.Lock()
	defer i.mu.Unlock()
	switch quiet := expected && silent > 0; {
	case quiet && (i.goneAt == notSet || i.backAt != notSet):
		i.goneAt, i.backAt = now-silent.Nanoseconds(), notSet
	case !quiet && i.goneAt != notSet && i.backAt == notSet:
		i.backAt = now
	}
	return i.goneAt, i.backAt, true
}

// isolated reports whether a request's failure seen over [from, now] may
// be this replica's own isolation: it began while no peer was heard (one
// that outlasts the isolation fails all the same, on the replica's side),
// and no worker answered a probe since an Interval and a half before from.
func (i *isolation) isolated(from, now int64) bool {
	return i.peersQuietAt(from, now) &&
		i.lastAnswer.Load() < from-3*i.interval/2
}

// probeIsolated is isolated for a probe of the given round (CheckNow's):
// no worker answered in this round or the one before either. The first
// round that fails counts, then: the failures of a replica cut off stop
// there, while a worker that dies beside others that answer is counted in
// every round, whatever the order in which a round's answers arrive and
// however the rounds bunch up on a busy replica.
func (i *isolation) probeIsolated(from, now int64, round uint64) bool {
	return i.peersQuietAt(from, now) && i.answeredRound.Load()+2 <= round
}

// peersQuietAt reports whether [from, now] began while no peer was heard.
func (i *isolation) peersQuietAt(from, now int64) bool {
	gone, back, ok := i.observe(now)
	return ok && gone != notSet && from >= gone && (back == notSet || from < back)
}

// noteCutOff records a failure not counted because of isolation.
func (i *isolation) noteCutOff() {
	if i.cutOff.CompareAndSwap(false, true) {
		i.log.Warn("this replica hears no peer and no worker: it is the one cut off; its failed probes do not count against workers")
	}
}

// noteAnswer records a worker's answer to a probe of round at now; an
// isolation it ends asks for every worker to be probed again at once.
func (i *isolation) noteAnswer(now int64, round uint64) {
	i.lastAnswer.Store(now)
	for {
		seen := i.answeredRound.Load()
		if seen >= round || i.answeredRound.CompareAndSwap(seen, round) {
			break
		}
	}
	i.endCutOff("a worker answered")
}

// checkContact asks after the peers at now, every EvalInterval (the evaluation
// loop calls it), which keeps the PeerContact's view of them current even
// while no probe fails, and ends an isolation once a peer is heard from
// again.
func (i *isolation) checkContact(now int64) {
	_, back, ok := i.observe(now)
	if ok && back != notSet && i.cutOff.Load() {
		i.endCutOff("a peer was heard from")
	}
}

func (i *isolation) endCutOff(why string) {
	if !i.cutOff.CompareAndSwap(true, false) {
		return
	}
	i.log.Info("this replica is in contact again; probing every worker now", "because", why)
	select {
	case i.recheck <- struct{}{}:
	default:
	}
}
