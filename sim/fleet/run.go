package fleet

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/virtualclock"
	"github.com/kvrouter/kvrouter/sim"
)

// epoch is the virtual instant at which every run starts. Fixed, so that the
// timestamps inside gossip packets, and so their sizes, repeat run to run.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Streams of the seeded random source, one per consumer, so that adding a
// draw to one never shifts the others.
const (
	streamBalancer = iota + 1
	streamNetwork
	streamGroups
	streamPolicies // + replica number
	// streamOracle is far above any replica's stream.
	streamOracle = 1 << 40
	// streamPlacerLoss draws the placer's lost answers.
	streamPlacerLoss = streamOracle + 1
)

// simulation is one run in progress. It is driven by one goroutine.
type simulation struct {
	cfg      Config
	clock    *virtualclock.Clock
	agenda   agenda
	workers  []*worker
	replicas []*replica
	oracle   *oracle
	net      network
	balancer *rand.Rand
	load     Workload

	inflight map[sim.RequestID]*request
	nextID   sim.RequestID
	// pending counts arrivals on the agenda plus requests in flight: the
	// run ends when it drops to zero.
	pending int
	stats   collector
	queues  queueDepth
	placing placerTraffic
	doors   doorTraffic
	// migration takes on the requests of the workers killed.
	migration migration
	// err is the first failure that ends the run early.
	err error
}

// Run simulates cfg's fleet under load until every request has completed
// and returns what it measured. It is deterministic: the same cfg and
// workload give the same Result.
func Run(cfg Config, load Workload) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	s, err := newSimulation(cfg.withDefaults(), load)
	if err != nil {
		return Result{}, err
	}
	s.run()
	if s.err != nil {
		return Result{}, s.err
	}
	return s.result(), nil
}

func newSimulation(cfg Config, load Workload) (*simulation, error) {
	s := &simulation{
		cfg: cfg, clock: virtualclock.New(epoch), load: load,
		balancer: seeded(cfg.Seed, streamBalancer),
		net:      network{delay: cfg.GossipDelay, loss: cfg.GossipLoss, rand: seeded(cfg.Seed, streamNetwork)},
		inflight: make(map[sim.RequestID]*request),
	}
	for id := 1; id <= cfg.totalWorkers(); id++ {
		engine := cfg.Engine
		if f, ok := cfg.Slowdown[affinity.WorkerID(id)]; ok {
			engine.Slowdown = f
		}
		s.workers = append(s.workers, newWorker(affinity.WorkerID(id), engine))
	}
	shared := newState(cfg, s.clock)
	for n := range cfg.Replicas {
		st := shared
		if cfg.Sync != SyncShared && n > 0 {
			st = newState(cfg, s.clock)
		}
		r, err := newReplica(cfg, n, st, s.clock, seeded(cfg.Seed, streamPolicies+uint64(n)))
		if err != nil {
			return nil, err
		}
		s.replicas = append(s.replicas, r)
	}
	s.placing = newPlacerTraffic(cfg, s.clock, &s.agenda, s.replicas, s.dispatch)
	s.doors = doorTraffic{cfg: cfg, clock: s.clock, agenda: &s.agenda, replicas: s.replicas, workers: len(s.workers),
		stats: &s.stats, busy: func() bool { return s.pending > 0 }, fail: s.fail}
	s.migration = migration{cfg: cfg, clock: s.clock, agenda: &s.agenda, stats: &s.stats, inflight: s.inflight,
		route: s.route, fail: s.fail}
	var err error
	s.oracle, err = newOracle(cfg, s.clock, s.replicas)
	return s, err
}

func seeded(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// run processes the agenda until no request is pending or a failure.
func (s *simulation) run() {
	for _, a := range s.load.Start() {
		s.schedule(a)
	}
	s.startGossip()
	s.scheduleKills()
	s.doors.start()
	s.startQueueSampling()
	for s.pending > 0 && s.agenda.len() > 0 && s.err == nil {
		e := s.agenda.pop()
		s.clock.AdvanceTo(e.at)
		s.handle(e)
	}
}

func (s *simulation) handle(e event) {
	switch e.kind {
	case evArrival:
		s.arrive(e.req)
	case evStep:
		if s.workers[e.target].fire(e.gen) {
			s.advance(e.target, e.at)
			s.reschedule(e.target)
		}
	case evDecode:
		s.dispatchDecode(e.req)
	case evTick:
		s.tick(e.target)
	case evDeliver:
		s.deliver(e.target, e.pkts)
	case evSample:
		s.sampleQueues()
	case evPlace:
		s.placing.place(e.req)
	case evPlaced:
		s.placing.placed(e.req)
	case evSilent:
		s.placing.silent(e.req)
	case evUnhold:
		s.placing.unhold(e.req)
	case evRefresh:
		s.doors.refresh(e.target)
	case evScrape:
		s.scrape(e.target, int(e.gen))
	case evAdmitted:
		s.route(e.req)
	case evQueueTimeout:
		s.doors.queueTimeout(e.req)
	case evKill:
		s.kill(e.target)
	case evRetry:
		s.route(e.req)
	}
}

// balance is the load balancer in front of the replicas: a replica picked
// uniformly at random, or with StickySessions the session's own.
func (s *simulation) balance(a Arrival) *replica {
	if s.cfg.StickySessions && a.Session >= 0 {
		return s.replicas[a.Session%len(s.replicas)]
	}
	return s.replicas[s.balancer.IntN(len(s.replicas))]
}

// schedule puts an arrival on the agenda.
func (s *simulation) schedule(a Arrival) {
	s.pending++
	s.agenda.push(event{at: max(a.At, s.clock.Elapsed()), kind: evArrival, req: &request{arrival: a, stream: newStream(a)}})
}

// arrive takes a request to a replica picked by the load balancer, and
// through its door.
func (s *simulation) arrive(req *request) {
	now := s.clock.Elapsed()
	s.stats.arrived(now)
	if next, ok := s.load.Arrived(req.arrival); ok {
		s.schedule(next)
	}
	s.nextID++
	req.id = s.nextID
	s.inflight[req.id] = req
	req.replica = s.balance(req.arrival)
	if s.doors.knock(req.replica, req) {
		s.route(req)
	}
}

// route decides a request on its replica and submits it to the chosen
// worker. A split fleet routes both phases at once, as the proxy does, so
// the decode guard is held from dispatch. A continuation is routed the
// same way, by its own prompt, among the candidates its stream has not
// used; none left fails it.
func (s *simulation) route(req *request) {
	r := req.replica
	req.pool = r.pool.Without(req.stream.streamed...)
	if req.pool.Len() == 0 {
		s.fail(req)
		return
	}
	areq := r.router.Prepare(s.cfg.Model, req.stream.prompt, req.arrival.SessionKey)
	req.areq = areq
	req.oracleOwner, req.oracleHit = s.oracle.wouldHit(areq, req.stream.streamed)
	s.decide(req)
}

// dispatch submits a decided request to its worker.
func (s *simulation) dispatch(req *request, decided core.Decided, guard *affinity.Guard, err error) {
	if err != nil {
		s.fail(req)
		return
	}
	r, areq, dec := req.replica, req.areq, decided.Decision
	if s.workers[s.index(dec.Worker)].dead {
		// Decided on what the replica knew before the worker died (a
		// placer's answer on its way): the connection fails, and the
		// attempt is retried as any cut before the first token.
		guard.Release()
		s.migration.retry(req)
		return
	}
	req.decided = decided
	s.stats.route(dec)
	s.oracle.judge(r, req.pool, areq, req.oracleOwner, req.oracleHit, dec)
	eng := s.workers[s.index(dec.Worker)].engine
	prompt := req.stream.prompt
	s.oracle.checkHit(dec, eng.CachedTokens(prompt), eng.Config().TokenCount(len(prompt)))
	sr := sim.Request{ID: req.id, Prompt: prompt, MaxTokens: req.stream.maxTokens}
	if r.decode == nil {
		req.guard, req.phase = guard, phaseServe
		s.submit(req, s.index(dec.Worker), sr)
		return
	}
	req.prefillGuard, req.phase = guard, phasePrefill
	if !s.routeDecode(r, req, areq) {
		return
	}
	sr.MaxTokens = 1
	s.submit(req, s.index(dec.Worker), sr)
}

// routeDecode picks the decode worker of a split request and takes its
// guard.
func (s *simulation) routeDecode(r *replica, req *request, areq *affinity.Request) bool {
	dec, guard, err := r.decode.Route(areq, r.decodePool)
	if err != nil {
		s.fail(req)
		return false
	}
	req.guard, req.decodeWorker = guard, s.index(dec.Worker)
	return true
}

// dispatchDecode sends a prefilled request to its decode worker with the
// prompt's KV to transfer.
func (s *simulation) dispatchDecode(req *request) {
	req.phase = phaseDecode
	s.submit(req, req.decodeWorker, sim.Request{
		ID: req.id, Prompt: req.arrival.Prompt, MaxTokens: req.arrival.MaxTokens,
		RemotePrefillTokens: req.transferred,
	})
}

// index is the position of worker id in s.workers.
func (s *simulation) index(id affinity.WorkerID) int { return int(id) - 1 }

// submit hands a request to worker w's engine at the current instant.
func (s *simulation) submit(req *request, w int, sr sim.Request) {
	now := s.clock.Elapsed()
	s.advance(w, now)
	wk := s.workers[w]
	if err := wk.engine.Submit(sr, now); err != nil {
		s.fail(req)
		return
	}
	req.on = wk
	wk.begin(now)
	s.reschedule(w)
}

// advance brings worker w's engine to now and handles what happened there.
func (s *simulation) advance(w int, now time.Duration) {
	for _, ev := range s.workers[w].engine.Advance(now) {
		s.onEngineEvent(w, ev)
	}
}

func (s *simulation) reschedule(w int) {
	if at, gen, ok := s.workers[w].due(); ok {
		s.agenda.push(event{at: at, kind: evStep, target: w, gen: gen})
	}
}

func (s *simulation) onEngineEvent(w int, ev sim.Event) {
	req := s.inflight[ev.ID]
	if req == nil {
		panic(fmt.Sprintf("fleet: worker %d reported unknown request %d", w+1, ev.ID))
	}
	switch ev.Kind {
	case sim.FirstToken:
		// The proxy relays the first token as it comes: the request's
		// prompt is no longer its worker's backlog.
		if req.phase == phasePrefill {
			req.prefillGuard.Prefilled()
		} else {
			req.guard.Prefilled()
			s.migration.streamed(req, ev.At)
		}
	case sim.Done:
		s.workers[w].end(ev.At, ev.Usage)
		if req.phase != phaseDecode {
			// The answer of the routed (prefill) worker judges the decision.
			req.replica.core.Answered(req.decided, core.Usage{PromptTokens: ev.Usage.Prompt,
				CachedTokens: ev.Usage.Cached, HasCached: true})
		}
		if req.phase == phasePrefill {
			req.prefillGuard.Release()
			req.transferred = ev.Usage.Prompt
			s.agenda.push(event{at: ev.At, kind: evDecode, req: req})
			return
		}
		req.guard.Release()
		s.stats.outputTokens += int64(req.stream.delivered + ev.Usage.Completion)
		s.finish(req, ev.At)
	}
}

// finish retires a request and lets a closed-loop workload send the next.
func (s *simulation) finish(req *request, at time.Duration) {
	s.doors.leave(req)
	delete(s.inflight, req.id)
	s.pending--
	s.stats.completed++
	s.stats.finished(at)
	next, ok := s.load.Completed(req.arrival, at)
	if ok {
		s.schedule(next)
		return
	}
	if req.arrival.Session >= 0 {
		s.stats.rollouts++
	}
}

// fail retires a request that could not be served, releasing its guards. A
// session goes on with its next turn, as an agent retries past an error.
func (s *simulation) fail(req *request) {
	req.release()
	s.doors.leave(req)
	delete(s.inflight, req.id)
	s.pending--
	s.stats.errs++
	if req.stream.cuts > 0 {
		s.stats.cutFailed++
	}
	if next, ok := s.load.Completed(req.arrival, s.clock.Elapsed()); ok {
		s.schedule(next)
	}
}
