package loadsync

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// t0 is the start of virtual time in the state-machine tests.
var t0 = time.Unix(1_700_000_000, 0)

// localLoads is a replica's own in-flight table, as the router would keep it.
type localLoads struct {
	mu    sync.Mutex
	loads map[uint32]int64
}

func newLocalLoads() *localLoads { return &localLoads{loads: make(map[uint32]int64)} }

func (l *localLoads) set(w uint32, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loads[w] = n
}

func (l *localLoads) read(dst []WorkerLoad) []WorkerLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w, n := range l.loads {
		dst = append(dst, WorkerLoad{Worker: w, InFlight: n})
	}
	return dst
}

// remoteTable records what OnRemoteLoad reported, as the router's atomic
// per-worker table would.
type remoteTable struct {
	mu    sync.Mutex
	sums  map[uint32]int64
	calls int
}

func newRemoteTable() *remoteTable { return &remoteTable{sums: make(map[uint32]int64)} }

func (r *remoteTable) store(w uint32, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sums[w] = n
	r.calls++
}

func (r *remoteTable) get(w uint32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sums[w]
}

func (r *remoteTable) snapshot() (map[uint32]int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.sums), r.calls
}

// learnedFacts records what OnOwnership reported.
type learnedFacts struct {
	mu    sync.Mutex
	facts []Fact
}

func (l *learnedFacts) add(f Fact) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.facts = append(l.facts, f)
}

func (l *learnedFacts) has(f Fact) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.facts {
		if g == f {
			return true
		}
	}
	return false
}

func (l *learnedFacts) all() []Fact {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Fact(nil), l.facts...)
}

// replica bundles a State with the fakes around it.
type replica struct {
	st      *State
	local   *localLoads
	remote  *remoteTable
	learned *learnedFacts
	// reads is the message types it announces: deliver hands it only the
	// packets Gossip would send it.
	reads typeSet
}

func newReplica(t testing.TB, origin string, tweak func(*Config)) *replica {
	t.Helper()
	r := &replica{local: newLocalLoads(), remote: newRemoteTable(), learned: &learnedFacts{}, reads: readable}
	cfg := Config{
		Origin:        origin,
		BootEpoch:     1,
		ClusterConfig: map[string]string{"block_size": "256"},
		LocalLoads:    r.local.read,
		OnRemoteLoad:  r.remote.store,
		OnOwnership:   r.learned.add,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", origin, err)
	}
	r.st = st
	return r
}

// deliver hands every packet to every receiver that wants its type, as
// Gossip sends them, failing on decode errors.
func deliver(t testing.TB, pkts [][]byte, now time.Time, to ...*replica) {
	t.Helper()
	for _, r := range to {
		for _, p := range pkts {
			if !r.reads.wants(p[0]) {
				continue
			}
			if err := r.st.Receive(p, now); err != nil {
				t.Fatalf("Receive: %v", err)
			}
		}
	}
}

// asLegacy makes r read only what builds before msgReport read, and
// sender report in their types as well, as a Gossip with such a peer does.
func asLegacy(r, sender *replica) *replica {
	r.reads = legacyReadable
	sender.st.SetLegacyPeers(true)
	return r
}

// sectionKinds lists the section kinds of a msgReport packet, nil for any
// other packet.
func sectionKinds(t testing.TB, p []byte) []byte {
	t.Helper()
	typ, r, err := readHeader(p)
	if err != nil || typ != msgReport {
		return nil
	}
	_, _, _, _ = r.str(), r.uvarint(), r.uvarint(), r.varint()
	var kinds []byte
	for r.remaining() > 0 {
		kind, n := r.byte(), r.uvarint()
		if r.err() != nil || n > uint64(r.remaining()) {
			t.Fatalf("a report's sections do not decode: %v", r.err())
		}
		r.off += int(n)
		kinds = append(kinds, kind)
	}
	return kinds
}

// chain returns the first n block hashes of one conversation: distinct
// across conversations and depths, and a prefix of any longer chain of the
// same conversation, as chained block hashes are.
func chain(conversation uint64, n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = mix(conversation*0x9e3779b97f4a7c15 + uint64(i+1))
	}
	return h
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// factsIn decodes digest packets into their facts.
func factsIn(t testing.TB, pkts [][]byte) []Fact {
	t.Helper()
	var out []Fact
	for _, p := range pkts {
		switch p[0] {
		case msgDigest:
			facts, err := decodeFacts(p, msgDigest)
			if err != nil {
				t.Fatalf("decode digest: %v", err)
			}
			out = append(out, facts...)
		case msgReport:
			_, r, _ := readHeader(p)
			rep, err := decodeReportPacket(&r)
			if err != nil {
				t.Fatalf("decode report: %v", err)
			}
			out = append(out, rep.facts...)
		}
	}
	return out
}

// factPackets counts the packets of pkts that carry facts: digests, and
// reports with a facts section.
func factPackets(t testing.TB, pkts [][]byte) int {
	n := 0
	for _, p := range pkts {
		if p[0] == msgDigest || slices.Contains(sectionKinds(t, p), secFacts) {
			n++
		}
	}
	return n
}
