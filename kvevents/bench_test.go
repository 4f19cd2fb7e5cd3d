package kvevents

import (
	"runtime"
	"testing"
)

// benchBlock is vLLM's default block size.
const benchBlock = 16

// storedBatch is a batch of one engine step that stores blocks blocks of a
// new prompt, each block named from first.
func storedBatch(b *testing.B, first EngineHash, blocks int) []byte {
	tokens := make([]uint32, blocks*benchBlock)
	for i := range tokens {
		tokens[i] = uint32(first)*7919 + uint32(i)
	}
	e := Event{Kind: Stored, Tokens: tokens, BlockSize: benchBlock, Tier: true}
	for i := range blocks {
		e.Hashes = append(e.Hashes, first+EngineHash(i))
	}
	p, err := Encode(Batch{TS: 1, Events: []Event{e}}, Positional)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkSetMemoryPerWorker fills one worker's set with 64 Ki blocks and
// reports the heap it holds: bytes per worker, per block, and for 1,024
// workers (the sets are independent, so that is 1,024 times one).
func BenchmarkSetMemoryPerWorker(b *testing.B) {
	const blocks = 64 << 10
	batches := make([][]byte, 0, blocks/64)
	for i := range blocks / 64 {
		batches = append(batches, storedBatch(b, EngineHash(i*64+1), 64))
	}
	var perWorker, tables float64
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := NewStream(NewSet(benchBlock, blocks))
		for seq, p := range batches {
			s.Offer(uint64(seq), p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// 32-bit keys: among 64 Ki blocks about one pair shares a key
		// (each such pair is held once).
		if s.Set().Len() < blocks-8 {
			b.Fatalf("the set holds %d blocks, want about %d", s.Set().Len(), blocks)
		}
		perWorker = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		tables = float64(s.Set().Bytes())
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perWorker, "bytes/worker")
	b.ReportMetric(perWorker/blocks, "bytes/block")
	b.ReportMetric(tables/blocks, "table-bytes/block")
	b.ReportMetric(perWorker*1024/(1<<30), "GiB/1024-workers")
}

// BenchmarkStreamCPUPer1000Events decodes and applies a subscriber's
// batches (an engine step storing 4 blocks, and one evicting them) and
// reports the CPU it takes per 1,000 events a second, in cores: what a
// replica spends per worker on the events' path, sockets aside.
func BenchmarkStreamCPUPer1000Events(b *testing.B) {
	const perBatch = 4
	stores := make([][]byte, 1024)
	removes := make([][]byte, 1024)
	for i := range stores {
		first := EngineHash(i*perBatch + 1)
		stores[i] = storedBatch(b, first, perBatch)
		e := Event{Kind: Removed, Tier: true}
		for j := range perBatch {
			e.Hashes = append(e.Hashes, first+EngineHash(j))
		}
		var err error
		if removes[i], err = Encode(Batch{TS: 1, Events: []Event{e}}, Positional); err != nil {
			b.Fatal(err)
		}
	}
	s := NewStream(NewSet(benchBlock, 1<<16))
	b.ReportAllocs()
	b.ResetTimer()
	seq := uint64(0)
	for i := range b.N {
		s.Offer(seq, stores[i%len(stores)])
		s.Offer(seq+1, removes[i%len(removes)])
		seq += 2
	}
	b.StopTimer()
	perEvent := float64(b.Elapsed().Nanoseconds()) / float64(2*b.N)
	b.ReportMetric(perEvent, "ns/event")
	b.ReportMetric(perEvent*1000/1e9, "cores/(1000-events/s)")
}

// BenchmarkLookupPerRequest is the lookup of one request on the sets: the
// keys of a 4,096-token prompt (256 blocks) and its match on each of 8
// workers' sets of 64 Ki blocks, every one holding the whole prompt (the
// longest walk). The subscribers' locks are left out (uncontended, tens of
// nanoseconds each).
func BenchmarkLookupPerRequest(b *testing.B) {
	const workers, blocks, promptBlocks = 8, 64 << 10, 256
	prompt := make([]uint32, promptBlocks*benchBlock)
	for i := range prompt {
		prompt[i] = uint32(i) * 31
	}
	sets := make([]*Set, workers)
	for w := range sets {
		s := NewStream(NewSet(benchBlock, blocks))
		for i := range (blocks - promptBlocks) / 64 {
			s.Offer(uint64(i), storedBatch(b, EngineHash(w<<24|i*64+1), 64))
		}
		e := Event{Kind: Stored, Tokens: prompt, BlockSize: benchBlock, Tier: true}
		for i := range promptBlocks {
			e.Hashes = append(e.Hashes, EngineHash(w<<24|1<<23|i))
		}
		if err := s.Set().Apply(e); err != nil {
			b.Fatal(err)
		}
		sets[w] = s.Set()
	}
	keys := make([]Key, 0, promptBlocks)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		keys = sets[0].Keys(keys[:0], "", prompt)
		for _, s := range sets {
			if s.Matched(keys) != promptBlocks {
				b.Fatal("a set does not hold the prompt")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/request")
}

// BenchmarkRelayPer1000Events is a peer's side of the relay: the packets a
// hearer wrote for an engine step storing 4 blocks and one evicting them,
// decoded and applied to the peer's view. It reports the CPU per 1,000
// events a second, in cores, and the relay's bytes per event: what every
// other replica of a tier spends and receives per event of an engine it
// does not hear itself.
func BenchmarkRelayPer1000Events(b *testing.B) {
	const perBatch = 4
	geo := geometry{benchBlock, 1 << 16}
	hearer := NewStream(NewSet(benchBlock, 1<<16))
	w := relayWriter{origin: "r1", geo: geo}
	hearer.OnApplied(func(a Applied) { w.batch(1, a) })
	events := 0
	for i := range 1024 {
		first := EngineHash(i*perBatch + 1)
		hearer.Offer(uint64(2*i), storedBatch(b, first, perBatch))
		e := Event{Kind: Removed, Tier: true}
		for j := range perBatch {
			e.Hashes = append(e.Hashes, first+EngineHash(j))
		}
		p, err := Encode(Batch{TS: 1, Events: []Event{e}}, Positional)
		if err != nil {
			b.Fatal(err)
		}
		hearer.Offer(uint64(2*i+1), p)
		events += 2 * perBatch
	}
	w.flush()
	bytes := 0
	for _, p := range w.packets {
		bytes += len(p)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		v := NewView(ViewConfig{BlockSize: benchBlock, MaxBlocks: 1 << 16})
		for _, p := range w.packets {
			if err := DecodeRelay(p, geo, func(o string, r RelayedBatch) { v.Relayed(o, r) }, func(string, Heartbeat) {}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	perEvent := float64(b.Elapsed().Nanoseconds()) / float64(b.N*events)
	b.ReportMetric(perEvent, "ns/event")
	b.ReportMetric(perEvent*1000/1e9, "cores/(1000-events/s)")
	b.ReportMetric(float64(bytes)/float64(events), "relay-bytes/event")
}
