package core

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
)

// LoRA residency across the tier. The routers place an adapter's requests
// by the residency table (affinity.Adapters): this replica's own requests
// of each adapter in flight per worker, counted exactly by their guards,
// and a view per worker of what the rest of the tier knows, which this file
// keeps. A replica reads the engines it has requests on (their
// vllm:lora_requests_info: max_lora, the adapters running and waiting) and
// tells its peers, by a gossip channel of its own (adapterwire.go), what it
// saw of each worker: its own requests of each adapter in flight there,
// when each was last active, whether its engine's latest reading showed it
// busy. Each replica reports only what it saw itself, so nothing echoes;
// the view of a worker merges this replica's own reading with every live
// peer's latest record.

// EngineAdapters is one reading of an engine's LoRA adapters
// (vllm:lora_requests_info).
type EngineAdapters struct {
	At time.Time
	// Slots is the engine's max_lora.
	Slots int
	// Running and Waiting are the adapters it runs and holds back.
	Running, Waiting []string
}

// Timings of the adapter gossip and of the views.
const (
	// adapterDeltaEvery is how often changed records go to the peers, and
	// adapterFullEvery how often every record that says something does: a
	// lost delta is repaired by the next full report.
	adapterDeltaEvery = 100 * time.Millisecond
	adapterFullEvery  = time.Second
	// adapterPeerTTL is how long a peer's record stands without being
	// repeated: three full reports.
	adapterPeerTTL = 3 * adapterFullEvery
	// engineBusyFor is how long an engine's reading that showed an adapter
	// running or waiting says it holds a slot: the tier's own requests are
	// counted exactly by their guards, so the reading's word, already up to
	// a scrape old, stands briefly, for requests from outside the tier (a
	// reading kept longer held adapters busy after their requests ended,
	// and sent new adapters and their next turns away from slots that had
	// room).
	engineBusyFor = 500 * time.Millisecond
	// adapterReportWindow is how long after its last activity an adapter
	// is still reported: a worker idle longer says nothing, and costs
	// nothing on the gossip.
	adapterReportWindow = time.Minute
	// adapterPacketsPerTick bounds the report's packets per tick; what does
	// not fit goes at the next one.
	adapterPacketsPerTick = 16
	// maxAdapterPeers bounds the peers whose records are kept.
	maxAdapterPeers = 64
	// maxAdapterNames bounds the adapters read of one engine reading.
	maxAdapterNames = affinity.MaxAdaptersPerWorker
)

// adapterRecordCost is the byte bound's charge of a peer's record.
func adapterRecordCost(r adapterRecord) int64 { return 64 + 32*int64(len(r.entries)) }

// loraState is the replica's side of the adapter gossip: its own latest
// engine readings and its peers' latest records. One mutex: it is the
// background's (readings, packets, ticks), never the request path's, which
// reads the table's views.
type loraState struct {
	table    *affinity.Adapters
	origin   string
	maxBytes int64
	maxPkt   int
	known    func(uint32) bool

	mu        sync.Mutex
	engine    map[affinity.WorkerID]engineReading
	peers     map[string]*adapterPeer
	sent      map[affinity.WorkerID]sentRecord // each worker's last record sent
	lastDelta time.Time
	// round is when the full report under way began: every record that
	// says something and was not sent since goes, over as many ticks as
	// the packet bound takes.
	round   time.Time
	bytes   atomic.Int64 // the peers' records, by adapterRecordCost
	refused atomic.Uint64
}

// sentRecord is a record as sent: what it said, and when.
type sentRecord struct {
	digest uint64
	at     time.Time
}

// engineReading is an engine's reading as keys.
type engineReading struct {
	at               time.Time
	slots            int
	running, waiting []affinity.AdapterKey
}

// adapterPeer is one peer's latest records, each with when it arrived.
type adapterPeer struct {
	records map[affinity.WorkerID]peerRecord
}

type peerRecord struct {
	at time.Time
	adapterRecord
}

// ObserveAdapters takes a reading of worker w's engine (the monitor's
// scrape) and refreshes w's view.
func (r *Replica) ObserveAdapters(w affinity.WorkerID, e EngineAdapters) {
	s := r.lora
	if s == nil || !r.reg.isKnown(uint32(w)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.engine[w] = engineReading{at: e.At, slots: e.Slots, running: keysOf(e.Running), waiting: keysOf(e.Waiting)}
	s.refresh(w, e.At)
}

// keysOf is the adapters' keys, at most maxAdapterNames.
func keysOf(names []string) []affinity.AdapterKey {
	keys := make([]affinity.AdapterKey, 0, min(len(names), maxAdapterNames))
	for _, n := range names[:min(len(names), maxAdapterNames)] {
		if k := affinity.AdapterKeyOf(n); k != 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// refresh rebuilds w's view from the engine's reading and the peers'
// records standing at now, and hands it to the table. Caller holds mu.
func (s *loraState) refresh(w affinity.WorkerID, now time.Time) {
	seen := map[affinity.AdapterKey]*affinity.AdapterSeen{}
	at := func(k affinity.AdapterKey) *affinity.AdapterSeen {
		if seen[k] == nil {
			seen[k] = &affinity.AdapterSeen{Key: k}
		}
		return seen[k]
	}
	v := affinity.AdapterView{}
	if e, ok := s.engine[w]; ok {
		v.Slots = e.slots
		for _, k := range append(slices.Clip(e.running), e.waiting...) {
			a := at(k)
			a.Last, a.BusyUntil = later(a.Last, e.at), later(a.BusyUntil, e.at.Add(engineBusyFor))
		}
	}
	for _, p := range s.peers {
		rec, ok := p.records[w]
		if !ok || now.Sub(rec.at) >= adapterPeerTTL {
			continue
		}
		if v.Slots == 0 {
			v.Slots = rec.slots
		}
		for _, e := range rec.entries {
			a := at(e.key)
			a.Last = later(a.Last, rec.at.Add(-time.Duration(e.ageMs)*time.Millisecond))
			if e.engineBusy {
				a.BusyUntil = later(a.BusyUntil, rec.at.Add(engineBusyFor))
			}
			if e.inFlight > 0 {
				a.BusyUntil = later(a.BusyUntil, rec.at.Add(adapterPeerTTL))
			}
		}
	}
	for _, a := range seen {
		v.Seen = append(v.Seen, *a)
	}
	slices.SortFunc(v.Seen, func(a, b affinity.AdapterSeen) int { return b.Last.Compare(a.Last) })
	s.table.SetView(w, v)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// AdapterChannel is the adapter gossip's channel (a loadsync.Channel), nil
// without LoRA residency or gossip.
func (r *Replica) AdapterChannel() *AdapterChannel {
	if r.lora == nil || r.lora.origin == "" {
		return nil
	}
	return &AdapterChannel{s: r.lora}
}

// AdapterChannel carries the adapter reports on the gossip. Outbox and
// Receive are the pump's, one goroutine.
type AdapterChannel struct{ s *loraState }

// Type is AdapterReportType.
func (c *AdapterChannel) Type() byte { return AdapterReportType }

// Outbox is the records to send every peer now: every adapterDeltaEvery
// those that changed since they were last sent, and every adapterFullEvery
// all that say something (over the next ticks, when they take more than
// adapterPacketsPerTick packets); it also lets the peers' records that
// stopped standing go.
func (c *AdapterChannel) Outbox(now time.Time) [][]byte {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.lastDelta) < adapterDeltaEvery {
		return nil
	}
	s.lastDelta = now
	s.expire(now)
	if now.Sub(s.round) >= adapterFullEvery {
		s.round = now
	}
	var out []adapterRecord
	for _, rec := range s.ownRecords(now) {
		sent, ok := s.sent[rec.worker]
		if (ok && sent.digest == digest(rec) && !sent.at.Before(s.round)) || (!ok && len(rec.entries) == 0) {
			continue
		}
		out = append(out, rec)
	}
	pkts, n := packRecords(s.origin, out, s.maxPkt, adapterPacketsPerTick)
	for _, rec := range out[:n] {
		if len(rec.entries) == 0 {
			delete(s.sent, rec.worker) // said once; a full report leaves it out
		} else {
			s.sent[rec.worker] = sentRecord{digest: digest(rec), at: now}
		}
	}
	return pkts
}

// ownRecords is what this replica saw of each worker, by worker id: its
// own requests of each adapter and its engine's latest reading, those
// active within adapterReportWindow, the most recent maxReportEntries; a
// worker it reported before and has nothing of now gets an empty record.
// Caller holds mu.
func (s *loraState) ownRecords(now time.Time) []adapterRecord {
	byWorker := map[affinity.WorkerID]map[affinity.AdapterKey]*ownEntry{}
	entry := func(w affinity.WorkerID, k affinity.AdapterKey) *ownEntry {
		if byWorker[w] == nil {
			byWorker[w] = map[affinity.AdapterKey]*ownEntry{}
		}
		if byWorker[w][k] == nil {
			byWorker[w][k] = &ownEntry{}
		}
		return byWorker[w][k]
	}
	s.table.EachOwn(func(u affinity.OwnUse) {
		if u.InFlight > 0 || now.Sub(u.Last) < adapterReportWindow {
			e := entry(u.Worker, u.Key)
			e.inFlight, e.last = u.InFlight, later(e.last, u.Last)
		}
	})
	for w, r := range s.engine {
		if now.Sub(r.at) >= adapterReportWindow {
			continue
		}
		for _, k := range append(slices.Clip(r.running), r.waiting...) {
			e := entry(w, k)
			e.last, e.busy = later(e.last, r.at), e.busy || now.Sub(r.at) < engineBusyFor
		}
	}
	for w := range s.sent {
		if byWorker[w] == nil {
			byWorker[w] = map[affinity.AdapterKey]*ownEntry{}
		}
	}
	out := make([]adapterRecord, 0, len(byWorker))
	for w, entries := range byWorker {
		out = append(out, s.record(w, entries, now))
	}
	slices.SortFunc(out, func(a, b adapterRecord) int { return cmp.Compare(a.worker, b.worker) })
	return out
}

// ownEntry is what this replica saw of one adapter on one worker.
type ownEntry struct {
	inFlight int64
	last     time.Time
	busy     bool
}

// record is worker w's record of entries at now: the most recent
// maxReportEntries, with the slots of its engine's latest reading.
func (s *loraState) record(w affinity.WorkerID, entries map[affinity.AdapterKey]*ownEntry, now time.Time) adapterRecord {
	rec := adapterRecord{worker: w, slots: s.engine[w].slots}
	for k, e := range entries {
		rec.entries = append(rec.entries, adapterEntry{key: k, engineBusy: e.busy, inFlight: e.inFlight,
			ageMs: max(now.Sub(e.last).Milliseconds(), 0)})
	}
	slices.SortFunc(rec.entries, func(a, b adapterEntry) int {
		return cmp.Or(cmp.Compare(a.ageMs, b.ageMs), cmp.Compare(a.key, b.key))
	})
	if len(rec.entries) > maxReportEntries {
		rec.entries = rec.entries[:maxReportEntries]
	}
	return rec
}

// digest stands for what a record says, but for its ages' drift: a record
// whose adapters were last active at the same instants says the same.
func digest(r adapterRecord) uint64 {
	b := appendRecord(nil, adapterRecord{worker: r.worker, slots: r.slots})
	for _, e := range r.entries {
		e.ageMs = 0
		b = appendRecord(b, adapterRecord{entries: []adapterEntry{e}})
	}
	return xxh3.Hash(b)
}

// Receive takes a peer's report that arrived at now.
func (c *AdapterChannel) Receive(pkt []byte, now time.Time) error {
	origin, records, err := decodeReport(pkt)
	if err != nil {
		return err
	}
	s := c.s
	if origin == s.origin {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[origin]
	if p == nil {
		if len(s.peers) >= maxAdapterPeers {
			s.refused.Add(1)
			return nil
		}
		p = &adapterPeer{records: map[affinity.WorkerID]peerRecord{}}
		s.peers[origin] = p
	}
	for _, rec := range records {
		if s.known(uint32(rec.worker)) {
			s.store(p, rec, now)
			s.refresh(rec.worker, now)
		}
	}
	return nil
}

// store keeps rec as p's record of its worker, within the byte bound: an
// empty record withdraws it. Caller holds mu.
func (s *loraState) store(p *adapterPeer, rec adapterRecord, now time.Time) {
	if old, ok := p.records[rec.worker]; ok {
		s.bytes.Add(-adapterRecordCost(old.adapterRecord))
		delete(p.records, rec.worker)
	}
	if len(rec.entries) == 0 {
		return
	}
	cost := adapterRecordCost(rec)
	if s.bytes.Add(cost) > s.maxBytes {
		s.bytes.Add(-cost)
		s.refused.Add(1)
		return
	}
	p.records[rec.worker] = peerRecord{at: now, adapterRecord: rec}
}

// expire lets the peers' records older than adapterPeerTTL go, and the
// views of their workers follow. Caller holds mu.
func (s *loraState) expire(now time.Time) {
	for origin, p := range s.peers {
		for w, rec := range p.records {
			if now.Sub(rec.at) >= adapterPeerTTL {
				s.bytes.Add(-adapterRecordCost(rec.adapterRecord))
				delete(p.records, w)
				s.refresh(w, now)
			}
		}
		if len(p.records) == 0 {
			delete(s.peers, origin)
		}
	}
}

// forget drops what this replica knows of workers that left the registry.
func (s *loraState) forget(w affinity.WorkerID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.engine, w)
	delete(s.sent, w)
	for _, p := range s.peers {
		if rec, ok := p.records[w]; ok {
			s.bytes.Add(-adapterRecordCost(rec.adapterRecord))
			delete(p.records, w)
		}
	}
	s.table.Forget(w)
}

// BusyAdapters is how many adapters hold a slot of worker w's engine now,
// by what the tier knows; 0 without LoRA residency.
func (r *Replica) BusyAdapters(w affinity.WorkerID) int {
	if r.adapters == nil {
		return 0
	}
	return r.adapters.Busy(w)
}

// AdapterSlots is worker w's max_lora as the tier knows it (its engine's
// reading, here or at a peer); 0 unknown, or without LoRA residency.
func (r *Replica) AdapterSlots(w affinity.WorkerID) int {
	if r.adapters == nil {
		return 0
	}
	return r.adapters.Slots(w)
}

// AdapterStats is what the residency costs. Safe at any time.
type AdapterStats struct {
	// Bytes is the table's and the peers' records', by their accounting.
	Bytes int64
	// Refused counts peers' records left out: past the byte bound, or
	// from a peer past maxAdapterPeers.
	Refused uint64
}

// AdapterStats reads the residency's costs; zero without it.
func (r *Replica) AdapterStats() AdapterStats {
	if r.lora == nil {
		return AdapterStats{}
	}
	return AdapterStats{Bytes: r.adapters.Bytes() + r.lora.bytes.Load(), Refused: r.lora.refused.Load()}
}
