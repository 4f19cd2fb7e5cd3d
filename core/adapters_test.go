package core

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

var _ loadsync.Channel = (*AdapterChannel)(nil)

// loraTier is n gossiping cores with LoRA residency over workers 1..workers.
func loraTier(t *testing.T, n, workers int) ([]*Replica, *testingclock.FakeClock) {
	t.Helper()
	return tierWith(t, n, workers, func(c *Config) { c.LoRA = true })
}

// adapterRequest is a request of adapter name.
func adapterRequest(rt *affinity.Router, name string, text []byte) *affinity.Request {
	req := rt.PrepareFor(affinity.CacheID{Model: name}, affinity.Text{text}, 0)
	req.Adapter = affinity.AdapterKeyOf(name)
	return req
}

// holdAdapter decides a request of adapter name on r and keeps it in flight.
func holdAdapter(t *testing.T, r *Replica, name string, text []byte) (Decided, *affinity.Guard) {
	t.Helper()
	rt := router(t, r)
	d, g, err := r.Decide(rt, adapterRequest(rt, name, text), allPool(r))
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

// swapAdapters runs the adapter channels' outboxes at now and delivers each
// one's packets to the others.
func swapAdapters(t *testing.T, rs []*Replica, now time.Time) {
	t.Helper()
	for i, from := range rs {
		for _, p := range from.AdapterChannel().Outbox(now) {
			for j, to := range rs {
				if i != j {
					if err := to.AdapterChannel().Receive(p, now); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

func TestAPeersRequestsOfAnAdapterMakeItResidentHere(t *testing.T) {
	rs, clk := loraTier(t, 2, 8)
	first, g := holdAdapter(t, rs[0], "sql-lora", prompt)
	defer g.Release()
	for w := affinity.WorkerID(1); w <= 8; w++ {
		if w != first.Worker {
			rs[1].Loads().Get(w).SetRemote(0)
		}
	}
	rs[1].Loads().Get(first.Worker).SetRemote(10) // busier than the rest, far from overloaded
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	for i := range 4 {
		d, g := holdAdapter(t, rs[1], "sql-lora", fmt.Appendf(nil, "another prompt %d", i))
		g.Release()
		if d.Worker != first.Worker {
			t.Fatalf("replica-1 sent sql-lora to %d, want %d where replica-0 runs it", d.Worker, first.Worker)
		}
	}
}

func TestAnEngineBusyWithOtherAdaptersIsSentNoNewOne(t *testing.T) {
	rs, clk := loraTier(t, 1, 2)
	r := rs[0]
	// Both workers' engines run one adapter in their one slot; worker 1 is
	// also where chat-lora's rendezvous order starts, or not: whichever it
	// is, chat-lora goes where it is resident.
	r.ObserveAdapters(1, EngineAdapters{At: clk.Now(), Slots: 1, Running: []string{"sql-lora"}})
	r.ObserveAdapters(2, EngineAdapters{At: clk.Now(), Slots: 1, Running: []string{"chat-lora"}})
	for _, tc := range []struct {
		adapter string
		want    affinity.WorkerID
	}{{"sql-lora", 1}, {"chat-lora", 2}} {
		d, g := holdAdapter(t, r, tc.adapter, prompt)
		g.Release()
		if d.Worker != tc.want {
			t.Fatalf("%s went to %d, want %d whose engine runs it", tc.adapter, d.Worker, tc.want)
		}
	}
	// Past the window, worker 1 still runs sql-lora and worker 2 is idle:
	// its slot is free for a new adapter.
	clk.Step(affinity.AdapterWindow + time.Second)
	r.ObserveAdapters(1, EngineAdapters{At: clk.Now(), Slots: 1, Running: []string{"sql-lora"}})
	r.ObserveAdapters(2, EngineAdapters{At: clk.Now(), Slots: 1})
	d, g := holdAdapter(t, r, "new-lora", prompt)
	g.Release()
	if d.Worker != 2 {
		t.Fatalf("new-lora went to %d, whose one slot runs sql-lora, want 2", d.Worker)
	}
}

func TestAPeersRecordStopsStandingWithoutRepeats(t *testing.T) {
	rs, clk := loraTier(t, 2, 4)
	_, g := holdAdapter(t, rs[0], "sql-lora", prompt)
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	if st := rs[1].AdapterStats(); st.Bytes == 0 {
		t.Fatal("replica-1 keeps nothing of replica-0's report")
	}
	g.Release()
	rs[0] = nil // replica-0 goes silent
	clk.Step(adapterPeerTTL)
	rs[1].AdapterChannel().Outbox(clk.Now())
	var peers int
	rs[1].lora.mu.Lock()
	peers = len(rs[1].lora.peers)
	rs[1].lora.mu.Unlock()
	if peers != 0 {
		t.Fatalf("%d peers' records kept %v after the last report", peers, adapterPeerTTL)
	}
}

func TestAFinishedRequestIsWithdrawnFromThePeersAtTheNextDelta(t *testing.T) {
	rs, clk := loraTier(t, 2, 4)
	d, g := holdAdapter(t, rs[0], "sql-lora", prompt)
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	remote := func() int64 {
		rs[1].lora.mu.Lock()
		defer rs[1].lora.mu.Unlock()
		n := int64(0)
		for _, p := range rs[1].lora.peers {
			for _, e := range p.records[d.Worker].entries {
				n += e.inFlight
			}
		}
		return n
	}
	if n := remote(); n != 1 {
		t.Fatalf("replica-1 counts %d of replica-0's requests in flight, want 1", n)
	}
	g.Release()
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	if n := remote(); n != 0 {
		t.Fatalf("replica-1 counts %d in flight after the release's delta, want 0", n)
	}
}

func TestAReportOfAWorkerOutsideTheRegistryIsDropped(t *testing.T) {
	rs, clk := loraTier(t, 2, 4)
	rs[0].SetRegistry([]affinity.WorkerID{1, 2, 3, 4, 99})
	rs[0].ObserveAdapters(99, EngineAdapters{At: clk.Now(), Slots: 2, Running: []string{"x"}})
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	if st := rs[1].AdapterStats(); st.Bytes != rs[1].adapters.Bytes() {
		t.Fatalf("replica-1 keeps %d bytes of records of a worker it does not know", st.Bytes-rs[1].adapters.Bytes())
	}
}

func TestReportsStayWithinThePacketSizeAndTheirByteBound(t *testing.T) {
	rs, clk := loraTier(t, 2, 400)
	for w := affinity.WorkerID(1); w <= 400; w++ {
		var names []string
		for i := range 20 {
			names = append(names, fmt.Sprintf("adapter-%d-%d", w, i))
		}
		rs[0].ObserveAdapters(w, EngineAdapters{At: clk.Now(), Slots: 4, Running: names})
	}
	rs[1].lora.maxBytes = 64 * 1024
	clk.Step(adapterDeltaEvery)
	pkts := rs[0].AdapterChannel().Outbox(clk.Now())
	if len(pkts) != adapterPacketsPerTick {
		t.Fatalf("%d packets in one tick, want the bound %d", len(pkts), adapterPacketsPerTick)
	}
	total := 0
	for ; len(pkts) > 0; pkts = rs[0].AdapterChannel().Outbox(clk.Now()) {
		for _, p := range pkts {
			if len(p) > loadsync.DefaultMaxPacketBytes {
				t.Fatalf("a packet of %d bytes, over %d", len(p), loadsync.DefaultMaxPacketBytes)
			}
			if err := rs[1].AdapterChannel().Receive(p, clk.Now()); err != nil {
				t.Fatal(err)
			}
			total++
		}
		clk.Step(adapterDeltaEvery)
	}
	if total <= adapterPacketsPerTick {
		t.Fatalf("%d packets in all: the rest never went", total)
	}
	st := rs[1].AdapterStats()
	if recs := st.Bytes - rs[1].adapters.Bytes(); recs > 64*1024 || st.Refused == 0 {
		t.Fatalf("records of %d bytes kept (bound 64 KiB), %d refused", recs, st.Refused)
	}
}

func TestAnAdapterReportSurvivesTheWire(t *testing.T) {
	in := []adapterRecord{
		{worker: 3, slots: 2, entries: []adapterEntry{{key: 7, engineBusy: true, inFlight: 4, ageMs: 0}, {key: 9, ageMs: 12345}}},
		{worker: 1 << 30},
	}
	pkts, n := packRecords("replica-a", in, 1300, 4)
	if n != 2 || len(pkts) != 1 {
		t.Fatalf("%d records in %d packets", n, len(pkts))
	}
	origin, out, err := decodeReport(pkts[0])
	if err != nil || origin != "replica-a" || fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("decoded %q %v (%v), want %v", origin, out, err, in)
	}
}

func TestMalformedAdapterReportsAreRefused(t *testing.T) {
	good, _ := packRecords("r", []adapterRecord{{worker: 1, entries: []adapterEntry{{key: 5, inFlight: 1}}}}, 1300, 1)
	for name, pkt := range map[string][]byte{
		"empty":          nil,
		"another type":   append([]byte{11}, good[0][1:]...),
		"truncated":      good[0][:len(good[0])-3],
		"too many":       append(append([]byte{}, good[0][:5]...), 1, 0, 200),
		"a long origin":  append([]byte{AdapterReportType, adapterWireVersion, 0xff, 0x01}, bytes.Repeat([]byte("x"), 300)...),
		"a zero key":     append(append([]byte{}, good[0][:4]...), 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1),
		"huge in flight": append(append([]byte{}, good[0][:4]...), 1, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1),
	} {
		if _, _, err := decodeReport(pkt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzAdapterReport(f *testing.F) {
	good, _ := packRecords("r", []adapterRecord{{worker: 1, slots: 2, entries: []adapterEntry{{key: 5, inFlight: 1, ageMs: 9}}}}, 1300, 1)
	f.Add(good[0])
	f.Fuzz(func(t *testing.T, pkt []byte) {
		origin, records, err := decodeReport(pkt)
		if err != nil {
			return
		}
		if len(origin) > maxOriginBytes {
			t.Fatalf("an origin of %d bytes", len(origin))
		}
		for _, r := range records {
			if len(r.entries) > maxReportEntries {
				t.Fatalf("%d entries", len(r.entries))
			}
		}
		again, n := packRecords(origin, records, 1<<20, 1)
		if n != len(records) {
			t.Fatalf("re-packed %d of %d records", n, len(records))
		}
		o2, r2, err := decodeReport(again[0])
		if err != nil || o2 != origin || fmt.Sprint(r2) != fmt.Sprint(records) {
			t.Fatalf("a report does not survive being sent again: %v", err)
		}
	})
}

func TestAPeersRequestsOfOneAdapterFillASlotHereToo(t *testing.T) {
	rs, clk := loraTier(t, 2, 2)
	for w := affinity.WorkerID(1); w <= 2; w++ {
		rs[0].ObserveAdapters(w, EngineAdapters{At: clk.Now(), Slots: 1})
	}
	a, g := holdAdapter(t, rs[0], "sql-lora", prompt)
	defer g.Release()
	clk.Step(adapterDeltaEvery)
	swapAdapters(t, rs, clk.Now())
	for i := range 4 {
		d, g := holdAdapter(t, rs[1], fmt.Sprint("other-lora-", i), prompt)
		g.Release()
		if d.Worker == a.Worker {
			t.Fatalf("other-lora-%d went to %d, whose one slot runs replica-0's sql-lora", i, d.Worker)
		}
	}
}
