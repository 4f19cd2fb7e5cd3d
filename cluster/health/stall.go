package health

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// minStall is the scheduling lag that counts as a stall of this replica: a
// heartbeat that wakes at least this much later than due. Shorter lags (GC
// pauses, a busy scheduler) are noise against any wedge timeout worth having;
// a SIGSTOP, a long GC or CPU throttling are not.
const minStall = time.Second

// maxStalls bounds the stalls remembered. A silence that spans more stalls
// than this is corrected for the latest ones only, which can only make it
// look longer than it was by the oldest stalls' length.
const maxStalls = 32

// span is a stretch of the Monitor's timeline, in nanoseconds.
type span struct{ from, to int64 }

// overlap is how much of [from, to] s covers.
func (s span) overlap(from, to int64) int64 {
	lo, hi := max(s.from, from), min(s.to, to)
	return max(hi-lo, 0)
}

// stallLog remembers when this replica itself was not running: the windows
// in which a heartbeat that should have come every EvalInterval came late.
// Nothing seen in such a window says anything about a worker: bytes sat in
// socket buffers, timers fired late, probes timed out on our side. Safe for
// concurrent use; the request path reads only its atomics.
type stallLog struct {
	period int64 // between heartbeats: Config.EvalInterval
	log    *slog.Logger

	mu     sync.Mutex
	last   int64 // previous heartbeat, or notSet
	ring   [maxStalls]span
	n      int
	next   int
	count  uint64
	total  int64
	latest atomic.Int64 // end of the latest stall, or notSet
	beatAt atomic.Int64 // the latest heartbeat, or notSet
}

func newStallLog(period time.Duration, log *slog.Logger) *stallLog {
	s := &stallLog{period: period.Nanoseconds(), log: log, last: notSet}
	s.latest.Store(notSet)
	s.beatAt.Store(notSet)
	return s
}

// beat is one heartbeat of the evaluation loop, at now: it notices a stall
// of this replica and logs it. Run calls it every EvalInterval; tests call it
// after stepping a FakeClock.
func (s *stallLog) beat(now int64) {
	if d := s.record(now); d > 0 {
		s.log.Warn("this replica was stalled; its observations of that window do not count against workers",
			"stalled", d.Round(time.Millisecond))
	}
}

// record records a heartbeat at now, due period after the previous one, and
// returns the stall it reveals (0 when the heartbeat was on time). The whole
// gap since the previous heartbeat counts as stalled: the replica may have
// stopped anywhere in it.
func (s *stallLog) record(now int64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.last
	s.last = now
	s.beatAt.Store(now)
	if prev == notSet || now-prev-s.period < minStall.Nanoseconds() {
		return 0
	}
	s.ring[s.next] = span{from: prev, to: now}
	s.next = (s.next + 1) % maxStalls
	s.n = min(s.n+1, maxStalls)
	s.count++
	s.total += now - prev
	s.latest.Store(now)
	return time.Duration(now - prev)
}

// touched reports whether [from, now] may have overlapped a stall: it began
// before the latest stall ended, or the heartbeat is overdue now (a stall
// that has ended but that the heartbeat has not noticed yet). Lock-free, for
// the request path.
func (s *stallLog) touched(from, now int64) bool {
	if end := s.latest.Load(); end != notSet && from < end {
		return true
	}
	beat := s.beatAt.Load()
	return beat != notSet && now-beat >= s.period+minStall.Nanoseconds()
}

// snapshot copies the remembered stalls, so that Tick can correct every
// worker's and attempt's silence without holding the lock.
func (s *stallLog) snapshot() stalls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return stalls(append([]span(nil), s.ring[:s.n]...))
}

// stats returns how many stalls were seen and their total length.
func (s *stallLog) stats() (uint64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, time.Duration(s.total)
}

// stalls is a copy of the remembered stalls.
type stalls []span

// silence is how long [from, now] lasted while this replica was running:
// its length less the stalls within it.
func (st stalls) silence(from, now int64) int64 {
	d := now - from
	for _, s := range st {
		d -= s.overlap(from, now)
	}
	return max(d, 0)
}
