package loadsync

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/affinity"
)

// TestGossipBudget prints, as a Markdown table, what the load and ownership
// gossip costs each replica at 8, 32 and 64 replicas x 16, 256 and 1024
// workers: bytes per second sent, the merged-load lag measured against the
// ground truth, and the memory of one replica's load table and index. It is
// skipped unless LOADSYNC_BUDGET=1 (scripts/bench.sh sets it).
//
// It runs the real State of every replica (encoder, merge, digests) on
// virtual time over a simulated network, driven by a simulated load process,
// rather than over real memberlist: 64 replicas reporting 1024 workers every
// 100 ms is some 40,000 packets and 40 million merged counts per second,
// which two shared cores cannot carry in real time, so a real-time run
// would measure the machine, not the design. TestMeasure runs real
// memberlist on loopback at small sizes.
//
// Every message a replica sends is there: load reports, prefill backlogs
// (each request's uncached prompt until its first token), the calibrations
// of predicted hits (judged at the first token) and the placer's counted
// answers (a tenth of the requests start a new session and ask the
// placer). Admission queues are empty and no worker is judged wedged, as in
// a tier that is not saturated.
//
// Knobs (environment): LOADSYNC_BUDGET_SECONDS (measured virtual seconds,
// default 10), LOADSYNC_BUDGET_SIZES ("8x16,64x1024", default all nine),
// LOADSYNC_BUDGET_LOSS (packet loss, default 0.01), LOADSYNC_BUDGET_SCHEMES
// (default "older,report": the encoding of v0.1.0, the older types, and
// this build's msgReport; "full" is msgReport with every report full),
// LOADSYNC_BUDGET_INFLIGHT (requests per worker, default 64).
func TestGossipBudget(t *testing.T) {
	if os.Getenv("LOADSYNC_BUDGET") != "1" {
		t.Skip("set LOADSYNC_BUDGET=1 to measure the gossip budget")
	}
	measured := 10 * time.Second
	if seconds, _ := strconv.Atoi(os.Getenv("LOADSYNC_BUDGET_SECONDS")); seconds > 0 {
		measured = time.Duration(seconds) * time.Second
	}
	loss, err := strconv.ParseFloat(cmpOr(os.Getenv("LOADSYNC_BUDGET_LOSS"), "0.01"), 64)
	if err != nil {
		t.Fatalf("LOADSYNC_BUDGET_LOSS: %v", err)
	}
	schemes := strings.Split(cmpOr(os.Getenv("LOADSYNC_BUDGET_SCHEMES"), "older,report"), ",")
	inflight, _ := strconv.Atoi(cmpOr(os.Getenv("LOADSYNC_BUDGET_INFLIGHT"), "64"))
	var rows []budgetRow
	for _, size := range budgetSizes(t) {
		for _, scheme := range schemes {
			b := budgetRun{
				replicas: size[0], workers: size[1], scheme: scheme, loss: loss,
				measured: measured,
				inflight: inflight, meanDuration: 10 * time.Second,
			}
			rows = append(rows, b.run(t))
		}
	}
	fmt.Println(budgetTable(rows, loss))
	fmt.Println(breakdownTable(rows))
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func budgetSizes(t *testing.T) [][2]int {
	spec := cmpOr(os.Getenv("LOADSYNC_BUDGET_SIZES"), "8x16,8x256,8x1024,32x16,32x256,32x1024,64x16,64x256,64x1024")
	var out [][2]int
	for _, s := range strings.Split(spec, ",") {
		var r, w int
		if _, err := fmt.Sscanf(s, "%dx%d", &r, &w); err != nil || r < 2 || w < 1 {
			t.Fatalf("LOADSYNC_BUDGET_SIZES: %q is not REPLICASxWORKERS", s)
		}
		out = append(out, [2]int{r, w})
	}
	return out
}

// budgetRun is one measurement: a fleet of workers, each holding about
// inflight requests at once, each request lasting an exponential time of
// mean meanDuration; every request arrives at a random replica (a load
// balancer in front), belongs to one of inflight x workers agentic
// sessions, goes to its session's worker and grows the session's prefix by
// 4 blocks per turn (up to 400). The fleet's request rate is
// workers x inflight / meanDuration whatever the replica count.
type budgetRun struct {
	replicas, workers int
	// scheme is "older" (the older types, as v0.1.0 sends them), "report"
	// (msgReport, the default) or "full" (msgReport, every report full).
	scheme       string
	loss         float64
	measured     time.Duration
	inflight     int
	meanDuration time.Duration
}

// budgetRow is what one run measured.
type budgetRow struct {
	run                       budgetRun
	loadBytes, digestBytes    float64 // payload per replica per second
	packets                   float64 // per replica per second
	lagP50, lagP99, lagMax    time.Duration
	samples                   int
	loadTableBytes, indexByte uint64 // of replica 0
	indexFacts                int
	requestsPerSec            float64
	// parts is the payload per replica per second by what it carries
	// (budgetPart), and reports the load reports per replica per second.
	parts   map[string]float64
	reports float64
}

const (
	// budgetWarmup runs before the counters start: every replica has sent
	// a full report and the in-flight counts are at their steady state.
	budgetWarmup = 2 * time.Second
	// budgetFraming is what a packet costs on the wire beyond our payload:
	// memberlist's framing (about 6 bytes) and UDP over IPv4 (28).
	budgetFraming = 6 + 28
	// budgetSampleEvery is how often the lag is sampled, at
	// budgetSampleWorkers random workers of every replica.
	budgetSampleEvery   = 50 * time.Millisecond
	budgetSampleWorkers = 8
	// budgetIndexBlocks is the index's per-worker budget: the router's
	// default --max-tree-size (64 MiB) in 256-byte blocks.
	budgetIndexBlocks = 1 << 26 / 256
)

// budgetEvent is one thing that happens on the virtual clock.
type budgetEvent struct {
	at      time.Duration
	kind    int // evTick, evDeliver, evArrive, evDepart, evSample, evFirstToken, evSettle
	replica int
	worker  uint32
	pkt     []byte
	// uncached is the prompt bytes a request's first token waits on, and
	// judged says whether the engine's answer judges a predicted hit.
	uncached int64
	judged   bool
}

const (
	evTick = iota
	evDeliver
	evArrive
	evDepart
	evSample
	evFirstToken
	evSettle
)

// The request model beyond counts: a tenth of the requests start a new
// session (the placer is asked, its answer settles 2 ms later); a
// request's first token comes after an exponential time of mean
// budgetTTFT, until which its uncached prompt (the whole of a new
// session's, a turn's new blocks otherwise) is its worker's backlog; the
// answer of a predicted hit is judged then, held 95 times in 100.
const (
	budgetNewSessions = 0.1
	budgetTTFT        = 200 * time.Millisecond
	budgetAnswer      = 2 * time.Millisecond
	budgetHeld        = 0.95
)

type budgetAgenda []budgetEvent

func (a budgetAgenda) Len() int           { return len(a) }
func (a budgetAgenda) Less(i, j int) bool { return a[i].at < a[j].at }
func (a budgetAgenda) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *budgetAgenda) Push(x any)        { *a = append(*a, x.(budgetEvent)) }
func (a *budgetAgenda) Pop() any {
	old := *a
	e := old[len(old)-1]
	*a = old[:len(old)-1]
	return e
}

// budgetSim is the state of one run.
type budgetSim struct {
	b                               budgetRun
	rng                             *rand.Rand
	agenda                          budgetAgenda
	now                             time.Duration
	states                          []*State
	names                           []string
	local                           [][]int64  // [replica][worker] own in-flight
	history                         [][]change // [replica*workers+worker] the truth, for the lag
	turns                           []int      // per session
	index                           *affinity.Index
	clock                           *testingclock.FakePassiveClock
	lags                            []time.Duration
	counting                        bool
	loadBytes, digestBytes, packets uint64
	requests                        uint64
	chainBuf                        []uint64
	backlog                         [][]int64 // [replica][worker] own prefill backlog
	asked, settled                  []uint64  // per replica, the placer's questions
	parts                           map[string]uint64
	reportsSent                     uint64
}

// change is one origin's count of one worker from time at on.
type change struct {
	at time.Duration
	n  int64
}

func (b budgetRun) run(t *testing.T) budgetRow {
	t.Helper()
	s := &budgetSim{b: b, rng: rand.New(rand.NewPCG(uint64(b.replicas), uint64(b.workers))),
		clock: testingclock.NewFakePassiveClock(t0)}
	s.index = affinity.NewIndex(s.clock, budgetIndexBlocks)
	s.local = make([][]int64, b.replicas)
	s.backlog = make([][]int64, b.replicas)
	s.asked, s.settled = make([]uint64, b.replicas), make([]uint64, b.replicas)
	s.parts = map[string]uint64{}
	s.history = make([][]change, b.replicas*b.workers)
	s.turns = make([]int, b.workers*b.inflight)
	for i := range b.replicas {
		s.local[i] = make([]int64, b.workers)
		s.backlog[i] = make([]int64, b.workers)
		s.names = append(s.names, fmt.Sprintf("replica-%02d", i))
		s.states = append(s.states, s.newState(t, i))
		// Phases spread over one interval, as independent processes.
		heap.Push(&s.agenda, budgetEvent{at: DefaultLoadInterval * time.Duration(i) / time.Duration(b.replicas), kind: evTick, replica: i})
	}
	// The steady state from the start: exponential durations are
	// memoryless, so the requests in flight at any instant have
	// exponential remaining lives too.
	for range b.workers * b.inflight {
		s.arrive()
	}
	heap.Push(&s.agenda, budgetEvent{at: s.nextArrival(), kind: evArrive})
	heap.Push(&s.agenda, budgetEvent{at: budgetWarmup, kind: evSample})
	end := budgetWarmup + b.measured
	for s.agenda.Len() > 0 && s.agenda[0].at <= end {
		s.step(heap.Pop(&s.agenda).(budgetEvent))
	}
	return s.row()
}

func (s *budgetSim) newState(t *testing.T, i int) *State {
	cfg := Config{
		Origin: s.names[i],
		// A replica up for a day, as the product stamps it (the start in
		// nanoseconds): the epoch and the send time take the bytes they
		// take there.
		BootEpoch:      uint64(t0.Add(-24 * time.Hour).UnixNano()),
		LocalLoads:     func(dst []WorkerLoad) []WorkerLoad { return appendLoads(dst, s.local[i]) },
		LocalBacklogs:  func(dst []WorkerLoad) []WorkerLoad { return appendLoads(dst, s.backlog[i]) },
		CountedAnswers: func() Counted { return Counted{Through: s.settled[i]} },
		OnCounted:      func(string, Counted) {},
		OnCalibration:  func(Calibration) {},
	}
	if s.b.scheme == "full" {
		cfg.FullReportInterval = DefaultLoadInterval
	}
	if i == 0 {
		cfg.OnOwnership = func(f Fact) {
			s.index.Learn(affinity.Fact{Hash: f.Hash, Worker: affinity.WorkerID(f.Worker), Span: f.Span})
		}
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.SetLegacyPeers(s.b.scheme == "older")
	return st
}

// reads is what every replica of the run reads: the older types only when
// the run measures them.
func (s *budgetSim) reads() typeSet {
	if s.b.scheme == "older" {
		return legacyReadable
	}
	return readable
}

func appendLoads(dst []WorkerLoad, local []int64) []WorkerLoad {
	for w, n := range local {
		if n != 0 {
			dst = append(dst, WorkerLoad{Worker: uint32(w), InFlight: n})
		}
	}
	return dst
}

func (s *budgetSim) step(e budgetEvent) {
	s.now = e.at
	s.clock.SetTime(t0.Add(e.at))
	if !s.counting && s.now >= budgetWarmup {
		s.counting = true
	}
	switch e.kind {
	case evTick:
		s.tick(e.replica)
	case evDeliver:
		if err := s.states[e.replica].Receive(e.pkt, s.clock.Now()); err != nil {
			panic(fmt.Sprintf("replica %d refused a packet: %v", e.replica, err))
		}
	case evArrive:
		s.arrive()
		heap.Push(&s.agenda, budgetEvent{at: s.now + s.nextArrival(), kind: evArrive})
	case evDepart:
		s.setLocal(e.replica, e.worker, -1)
	case evSample:
		s.sample()
		heap.Push(&s.agenda, budgetEvent{at: s.now + budgetSampleEvery, kind: evSample})
	case evFirstToken:
		s.backlog[e.replica][e.worker] -= e.uncached
		if e.judged {
			s.states[e.replica].Judged(e.worker, s.rng.Float64() < budgetHeld)
		}
	case evSettle:
		s.settled[e.replica]++
	}
}

// tick runs replica i's State and sends each packet to every peer after
// 0.2-2.2 ms (so packets can overtake each other), each copy lost with the
// run's probability.
func (s *budgetSim) tick(i int) {
	st := s.states[i]
	before := st.Stats().ReportsSent
	pkts := st.Tick(s.clock.Now())
	if s.counting {
		s.reportsSent += st.Stats().ReportsSent - before
	}
	reads := s.reads()
	for _, p := range pkts {
		if !reads.wants(p[0]) {
			continue
		}
		for peer := range s.states {
			if peer == i {
				continue
			}
			if s.counting {
				s.packets++
				s.loadBytes += uint64(len(p))
				addParts(s.parts, p)
			}
			if s.rng.Float64() < s.b.loss {
				continue
			}
			delay := 200*time.Microsecond + time.Duration(s.rng.Int64N(int64(2*time.Millisecond)))
			heap.Push(&s.agenda, budgetEvent{at: s.now + delay, kind: evDeliver, replica: peer, pkt: p})
		}
	}
	next := max(st.NextTick().Sub(t0), s.now+1)
	heap.Push(&s.agenda, budgetEvent{at: next, kind: evTick, replica: i})
}

func (s *budgetSim) nextArrival() time.Duration {
	rate := float64(s.b.workers*s.b.inflight) / s.b.meanDuration.Seconds()
	return time.Duration(s.rng.ExpFloat64() / rate * float64(time.Second))
}

// arrive starts one request at a random replica: the routing decision
// (ownership recorded, the placer asked for a new session), the in-flight
// count, its backlog until its first token, and its departure.
func (s *budgetSim) arrive() {
	r := s.rng.IntN(s.b.replicas)
	session := s.rng.IntN(len(s.turns))
	if s.rng.Float64() < budgetNewSessions {
		s.turns[session] = 0
		s.asked[r]++
		heap.Push(&s.agenda, budgetEvent{at: s.now + budgetAnswer, kind: evSettle, replica: r})
	}
	s.turns[session]++
	w := uint32(mix(uint64(session)) % uint64(s.b.workers))
	blocks := min(8+4*s.turns[session], 400)
	hashes := s.chainOf(uint64(session), blocks)
	s.states[r].Owned(hashes, w)
	if r == 0 {
		s.index.Insert(hashes, affinity.WorkerID(w))
	}
	s.setLocal(r, w, +1)
	if s.counting {
		s.requests++
	}
	uncached := int64(4 * 256)
	if s.turns[session] == 1 {
		uncached = int64(blocks * 256)
	}
	s.backlog[r][w] += uncached
	life := time.Duration(s.rng.ExpFloat64() * float64(s.b.meanDuration))
	ttft := min(time.Duration(s.rng.ExpFloat64()*float64(budgetTTFT)), life)
	heap.Push(&s.agenda, budgetEvent{at: s.now + ttft, kind: evFirstToken, replica: r, worker: w,
		uncached: uncached, judged: s.turns[session] > 1})
	heap.Push(&s.agenda, budgetEvent{at: s.now + life, kind: evDepart, replica: r, worker: w})
}

func (s *budgetSim) chainOf(session uint64, n int) []uint64 {
	s.chainBuf = s.chainBuf[:0]
	for i := range n {
		s.chainBuf = append(s.chainBuf, mix(session*0x9e3779b97f4a7c15+uint64(i+1)))
	}
	return s.chainBuf
}

func (s *budgetSim) setLocal(r int, w uint32, d int64) {
	s.local[r][w] += d
	h := &s.history[r*s.b.workers+int(w)]
	*h = append(*h, change{at: s.now, n: s.local[r][w]})
}

// sample measures, at a few random workers of every replica, the merged
// load's lag: the largest, over the other replicas, of how long ago this
// replica's belief of that replica's count was last true.
func (s *budgetSim) sample() {
	for r, st := range s.states {
		for range budgetSampleWorkers {
			w := uint32(s.rng.IntN(s.b.workers))
			var lag time.Duration
			for o := range s.states {
				if o != r {
					lag = max(lag, s.staleness(st, o, w))
				}
			}
			s.lags = append(s.lags, lag)
		}
	}
}

// staleness is how long ago origin o's count of w last equalled what st
// believes it is: zero when it equals it now.
func (s *budgetSim) staleness(st *State, o int, w uint32) time.Duration {
	var belief int64
	if ol := st.peers.loads.origins[s.names[o]]; ol != nil {
		belief = ol.loads[w]
	}
	h := s.history[o*s.b.workers+int(w)]
	until := s.now // the end of the interval being looked at
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].n == belief {
			return s.now - until
		}
		until = h[i].at
	}
	if belief == 0 { // the count before its first change
		return s.now - until
	}
	return s.now // never true
}

func (s *budgetSim) row() budgetRow {
	secs := s.b.measured.Seconds() * float64(s.b.replicas)
	lag := summarise(s.lags, uint64(len(s.lags)))
	row := budgetRow{
		run: s.b, loadBytes: float64(s.loadBytes) / secs, digestBytes: float64(s.digestBytes) / secs,
		packets: float64(s.packets) / secs, lagP50: lag.P50, lagP99: lag.P99, lagMax: lag.Max,
		samples: len(s.lags), requestsPerSec: float64(s.requests) / s.b.measured.Seconds(),
		parts: map[string]float64{}, reports: float64(s.reportsSent) / secs,
	}
	for part, n := range s.parts {
		row.parts[part] = float64(n) / secs
	}
	// Digests ride report packets: their part is theirs, the rest is load.
	row.digestBytes = row.parts["digests"]
	row.loadBytes -= row.digestBytes
	row.indexFacts = len(s.index.Recent(math.MaxInt32))
	st := s.states[0]
	s.lags, s.history = nil, nil
	row.loadTableBytes = retained(func() { st.peers.loads = newLoadView(st.cfg.LoadTTL, nil) })
	row.indexByte = retained(func() { s.index = nil })
	runtime.KeepAlive(s) // else the second measure counts the whole simulation freed
	return row
}

// retained measures the heap that drop releases: the live bytes before it
// minus after it, each after a full collection.
func retained(drop func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // the second frees what the first only moved aside (sync.Pool's victims)
	runtime.ReadMemStats(&before)
	drop()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		return 0
	}
	return before.HeapAlloc - after.HeapAlloc
}

func budgetTable(rows []budgetRow, loss float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Per replica, %.0f%% packet loss, 0.2-2.2 ms one-way delay; each worker holds ~%d requests of %v mean duration.\n\n",
		loss*100, rows[0].run.inflight, rows[0].run.meanDuration)
	b.WriteString("| replicas | workers | reports | fleet req/s | load B/s | digest B/s | total B/s | on the wire B/s | packets/s | merged-load lag p50 / p99 / max ms | load table KiB | load table B per worker | index MiB | index facts |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		total := r.loadBytes + r.digestBytes
		fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %s | %s | %s | %s | %.0f | %.0f / %.0f / %.0f | %.0f | %.0f | %.1f | %d |\n",
			r.run.replicas, r.run.workers, r.run.scheme, r.requestsPerSec,
			si(r.loadBytes), si(r.digestBytes), si(total), si(total+budgetFraming*r.packets), r.packets,
			ms(r.lagP50), ms(r.lagP99), ms(r.lagMax),
			float64(r.loadTableBytes)/1024, float64(r.loadTableBytes)/float64(r.run.workers), float64(r.indexByte)/(1<<20), r.indexFacts)
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// si prints a byte rate with a k or M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k", v/1e3)
	}
	return fmt.Sprintf("%.0f", math.Round(v))
}
