package loadsync

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// fuzzSeeds are valid messages of every kind, for the fuzzers to mutate.
func fuzzSeeds(t testing.TB) [][]byte {
	a := newVerdictReplica(t, "seed", func(c *Config) { c.Tags = map[string]string{"raft": "127.0.0.1:7947"} })
	a.board.set(wedged3, degraded5)
	a.local.set(0, 1)
	a.local.set(7, -2)
	a.local.set(math.MaxUint32, 1<<40)
	a.st.Owned(chain(1, 9), 300)
	a.st.Judged(300, false)
	a.st.Judged(math.MaxUint32, true)
	seeds := a.st.Tick(t0)
	a.local.set(7, 3)
	seeds = append(seeds, a.st.Tick(t0.Add(DefaultLoadInterval))...) // the full report again and a delta
	queues := appendQueueReport(nil, &queueReport{origin: "seed", epoch: 1, seq: 1,
		depths: []QueueDepth{{Class: 2, Tenant: 1 << 63, Queued: 3, InFlight: 4, Tokens: 1 << 20}}})
	counted := appendCounted(nil, "seed", Counted{Through: 7, Also: []uint64{9, 1 << 40}})
	backlog := appendLoadReport(nil, &loadReport{origin: "seed", epoch: 1, seq: 3, hi: math.MaxUint32, backlog: true,
		entries: []WorkerLoad{{Worker: 7, InFlight: 1 << 30}, {Worker: math.MaxUint32, InFlight: maxBacklog}}})
	return append(seeds, a.st.LocalState(true), a.st.Meta(), queues, counted, backlog, nil, []byte{msgLoad, protocolVersion, 0xff})
}

func FuzzReceive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, packet []byte) {
		r := newVerdictReplica(t, "r", nil)
		err := r.st.Receive(packet, t0)
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrUnexpectedMessage) {
			t.Fatalf("Receive error %v wraps no sentinel", err)
		}
		if _, verdictCalls := r.heard.get(""); err != nil && (len(r.st.Origins(t0)) != 0 || len(r.learned.all()) != 0 || verdictCalls != 0) {
			t.Fatalf("a rejected packet changed the state")
		}
	})
}

// FuzzDecodeLoadReport checks what the decoder promises Receive: entries
// strictly increasing and inside the packet's range.
func FuzzDecodeLoadReport(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, packet []byte) {
		typ, r, err := readHeader(packet)
		if err != nil || typ != msgLoad {
			return
		}
		rep, err := decodeLoadReport(&r)
		if err != nil {
			return
		}
		for i, e := range rep.entries {
			if e.Worker < rep.lo || e.Worker > rep.hi || (i > 0 && e.Worker <= rep.entries[i-1].Worker) {
				t.Fatalf("entry %d (worker %d) out of order or outside [%d, %d]", i, e.Worker, rep.lo, rep.hi)
			}
		}
	})
}

func FuzzMergeRemoteState(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		r := newReplica(t, "r", nil)
		if err := r.st.MergeRemoteState(buf); err != nil && len(r.learned.all()) != 0 {
			t.Fatalf("a rejected state taught facts")
		}
		// Whatever was learned is served back in a state that decodes.
		if _, err := decodeFacts(r.st.LocalState(true), msgFullState); err != nil {
			t.Fatalf("LocalState after merge does not decode: %v", err)
		}
	})
}

func FuzzCheckJoin(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, meta []byte) {
		r := newReplica(t, "r", nil)
		_ = r.st.CheckJoin(meta)
	})
}

// TestLoadReportRoundTrip checks the packer and decoder against each other
// on random reports: the packets tile the id space and carry every entry.
func TestLoadReportRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		var loads []WorkerLoad
		for range rng.IntN(400) {
			loads = append(loads, WorkerLoad{Worker: rng.Uint32() >> rng.IntN(32), InFlight: rng.Int64N(1<<20) - 1<<19})
		}
		loads = normalizeLoads(loads)
		base := loadReport{origin: "o", epoch: rng.Uint64(), seq: rng.Uint64(), sentAt: rng.Int64()}
		maxBytes := minPacketBytes + rng.IntN(1200)
		var got []WorkerLoad
		next := uint64(0)
		for _, p := range packLoadReport(base, slices.Clone(loads), maxBytes) {
			if len(p) > maxBytes {
				t.Fatalf("packet of %d bytes over %d", len(p), maxBytes)
			}
			_, r, err := readHeader(p)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := decodeLoadReport(&r)
			if err != nil {
				t.Fatal(err)
			}
			if uint64(rep.lo) != next || rep.epoch != base.epoch || rep.seq != base.seq || rep.sentAt != base.sentAt {
				t.Fatalf("packet range starts at %d, want %d; or header fields changed", rep.lo, next)
			}
			next = uint64(rep.hi) + 1
			got = append(got, rep.entries...)
		}
		if next != math.MaxUint32+1 {
			t.Fatalf("ranges end at %d, not at the top of the id space", next-1)
		}
		if !slices.Equal(got, loads) && len(got)+len(loads) > 0 {
			t.Fatalf("round trip lost entries: %d in, %d out", len(loads), len(got))
		}
	}
}

func TestDecodeRejectsAGapThatWrapsAround(t *testing.T) {
	b := appendHeader(nil, msgLoad)
	b = appendString(b, "a")
	b = binary.AppendUvarint(b, 1)                // epoch
	b = binary.AppendUvarint(b, 1)                // seq
	b = binary.AppendVarint(b, 0)                 // sentAt
	b = binary.AppendUvarint(b, 5)                // lo
	b = binary.AppendUvarint(b, 10)               // hi
	b = binary.AppendUvarint(b, 1)                // count
	b = binary.AppendUvarint(b, math.MaxUint64-2) // 5 + gap wraps to 2
	b = binary.AppendVarint(b, 1)
	r := newReplica(t, "r", nil)
	if err := r.st.Receive(b, t0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Receive = %v, want ErrMalformed", err)
	}
	if got := r.st.Remote(2); got != 0 {
		t.Fatalf("a worker outside the packet's range got load %d", got)
	}
}

func TestDecodeRejectsASpanOver32Bits(t *testing.T) {
	b := appendHeader(nil, msgDigest)
	b = binary.AppendUvarint(b, 1)                 // count
	b = binary.AppendUvarint(b, 3)                 // worker
	b = binary.AppendUvarint(b, math.MaxUint32+1)  // span
	b = binary.LittleEndian.AppendUint64(b, 0xabc) // hash
	r := newReplica(t, "r", nil)
	if err := r.st.Receive(b, t0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Receive = %v, want ErrMalformed", err)
	}
	if n := len(r.learned.all()); n != 0 {
		t.Fatalf("learned %d facts from a refused digest", n)
	}
}
