package loadsync

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// queueBoard is a replica's own queue depths, and what it heard of its peers'.
type queueBoard struct {
	mu    sync.Mutex
	own   []QueueDepth
	heard map[string][]QueueDepth
	calls int
}

func (b *queueBoard) set(ds ...QueueDepth) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.own = ds
}

func (b *queueBoard) read(dst []QueueDepth) []QueueDepth {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(dst, b.own...)
}

func (b *queueBoard) store(origin string, ds []QueueDepth) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.heard == nil {
		b.heard = map[string][]QueueDepth{}
	}
	b.calls++
	if ds == nil {
		delete(b.heard, origin)
		return
	}
	b.heard[origin] = slices.Clone(ds)
}

func (b *queueBoard) get(origin string) []QueueDepth {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heard[origin]
}

func newQueueReplica(t testing.TB, origin string) (*replica, *queueBoard) {
	b := &queueBoard{}
	r := newReplica(t, origin, func(c *Config) { c.LocalQueues, c.OnQueues = b.read, b.store })
	return r, b
}

func TestQueueDepthsReachPeersAndAreWithdrawn(t *testing.T) {
	a, ab := newQueueReplica(t, "a")
	b, bb := newQueueReplica(t, "b")
	_ = b
	now := t0
	small := QueueDepth{Class: 1, Tenant: 7, Queued: 2, InFlight: 1, Tokens: 300, WaitedMs: 1200}
	big := QueueDepth{Class: 3, Tenant: 9, Queued: 40, InFlight: 4, Tokens: 4000, WaitedMs: 35}
	ab.set(small, big)
	deliver(t, a.st.Tick(now), now, b)
	if got := bb.get("a"); !slices.Equal(got, []QueueDepth{big, small}) {
		t.Fatalf("b holds %v for a, want the longest queue first", got)
	}
	ab.set()
	now = now.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	if got := bb.get("a"); len(got) != 0 {
		t.Fatalf("b holds %v after a's queue emptied", got)
	}
}

// TestAnOlderBuildsQueueReportStillDecodes: a report without the waits
// (an older build's, which ends after its entries) is taken, its waits 0.
func TestAnOlderBuildsQueueReportStillDecodes(t *testing.T) {
	b, bb := newQueueReplica(t, "b")
	d := QueueDepth{Class: 2, Tenant: 5, Queued: 3, InFlight: 2, Tokens: 900, WaitedMs: 70}
	p := appendQueueReport(nil, &queueReport{origin: "old", epoch: 1, seq: 1, depths: []QueueDepth{d}})
	old := p[:len(p)-1] // the one wait is one byte
	if err := b.st.Receive(old, t0); err != nil {
		t.Fatalf("an older build's report: %v", err)
	}
	d.WaitedMs = 0
	if got := bb.get("old"); !slices.Equal(got, []QueueDepth{d}) {
		t.Fatalf("b holds %v for the older build, want %v", got, d)
	}
}

func TestAQueueReportIsBoundedAndSizedInHundredsOfBytes(t *testing.T) {
	a, ab := newQueueReplica(t, "a")
	var many []QueueDepth
	for i := range 100 {
		many = append(many, QueueDepth{Class: uint8(i % 4), Tenant: uint64(i) << 50, Queued: uint32(i), InFlight: 100, Tokens: 1 << 20,
			WaitedMs: 60_000})
	}
	ab.set(many...)
	for _, p := range a.st.Tick(t0) {
		if p[0] != msgQueues {
			continue
		}
		r := reader{buf: p, off: headerBytes}
		rep, err := decodeQueueReport(&r)
		if err != nil || len(rep.depths) != MaxQueueDepths || rep.depths[0].Queued != 99 {
			t.Fatalf("decoded %d entries, first %+v, %v; want the %d longest queues", len(rep.depths), rep.depths[0], err, MaxQueueDepths)
		}
		if len(p) > 400 {
			t.Fatalf("a full queue report is %d bytes, want a few hundred", len(p))
		}
		return
	}
	t.Fatal("no queue report sent")
}

func TestForgedQueueReportsAreRefusedOrBounded(t *testing.T) {
	b, bb := newQueueReplica(t, "b")
	over := queueReport{origin: "x", epoch: 1, seq: 1}
	for i := range MaxQueueDepths + 1 {
		over.depths = append(over.depths, QueueDepth{Tenant: uint64(i)})
	}
	if err := b.st.Receive(appendQueueReport(nil, &over), t0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a report of %d entries: %v, want ErrMalformed", MaxQueueDepths+1, err)
	}
	huge := queueReport{origin: "x", epoch: 1, seq: 1, depths: []QueueDepth{{Tokens: 1 << 41}}}
	if err := b.st.Receive(appendQueueReport(nil, &huge), t0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("tokens past 2^40: %v, want ErrMalformed", err)
	}
	for i := range maxQueueOrigins + 50 {
		rep := queueReport{origin: fmt.Sprintf("stranger-%d", i), epoch: 1, seq: 1, depths: []QueueDepth{{Queued: 1}}}
		if err := b.st.Receive(appendQueueReport(nil, &rep), t0); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(bb.heard); n != maxQueueOrigins {
		t.Fatalf("%d origins held, want at most %d", n, maxQueueOrigins)
	}
}

func TestStaleQueueReportsAreIgnoredAndSilentOnesExpire(t *testing.T) {
	a, ab := newQueueReplica(t, "a")
	b, bb := newQueueReplica(t, "b")
	ab.set(QueueDepth{Tenant: 1, Queued: 5})
	first := a.st.Tick(t0)
	ab.set(QueueDepth{Tenant: 1, Queued: 6})
	now := t0.Add(DefaultLoadInterval)
	second := a.st.Tick(now)
	deliver(t, second, now, b)
	deliver(t, first, now, b)
	if got := bb.get("a"); len(got) != 1 || got[0].Queued != 6 {
		t.Fatalf("b holds %v, want the newer report", got)
	}
	b.st.Tick(now.Add(DefaultLoadTTL + DefaultLoadInterval))
	if got := bb.get("a"); got != nil {
		t.Fatalf("a silent origin's report held past the TTL: %v", got)
	}
	deliver(t, second, now, b)
	b.st.Forget("a")
	if got := bb.get("a"); got != nil {
		t.Fatal("a forgotten origin's report is dropped at once")
	}
}
