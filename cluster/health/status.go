package health

import "time"

// WorkerStatus is a point-in-time view of one worker's health, for /get_loads,
// metrics and logs.
type WorkerStatus struct {
	ID       WorkerID
	URL      string
	Eligible bool // what Eligible would answer
	Healthy  bool // verdict of the active checks; false until a probe answered 2xx
	Probed   bool // an active check has answered (2xx or not) at least once
	// Circuit is the breaker state; Circuit.String() gives "closed", "open" or
	// "half_open", and its numeric value is the vllm_router_cb_state gauge.
	Circuit CircuitState
	// CircuitTransitions counts the moves into each state, indexed by
	// CircuitState (vllm_router_cb_state_transitions_total{to=...}).
	CircuitTransitions [3]uint64
	Wedged             bool
	Degraded           bool
	RemoteVerdicts     int   // replicas currently holding a verdict against it
	RemoteOut          bool  // those verdicts take it out here (quorum, or this replica's evidence)
	InFlight           int64 // attempts begun and not ended (not the router's load)
	// EngineRunning is vllm:num_requests_running at the latest good scrape of
	// the worker's /metrics (scraped while its requests are silent, and every
	// EngineScrapeInterval while it is busy), or -1.
	EngineRunning float64
	// LastProgress is the latest progress seen, or the start of the current busy
	// period; the zero time if there has been neither.
	LastProgress time.Time
}

func (j *judge) status(id WorkerID) (WorkerStatus, bool) {
	w := j.lookup(id)
	if w == nil {
		return WorkerStatus{}, false
	}
	return j.statusOf(w), true
}

func (j *judge) statuses() []WorkerStatus {
	list := j.workers.Load().list
	out := make([]WorkerStatus, 0, len(list))
	for _, w := range list {
		out = append(out, j.statusOf(w))
	}
	return out
}

func (j *judge) statusOf(w *worker) WorkerStatus {
	st := WorkerStatus{
		ID:             w.id,
		URL:            w.url,
		Eligible:       w.eligible() && w.hasSlot(),
		Healthy:        w.healthy.Load(),
		Probed:         w.probed.Load(),
		Circuit:        stateOf(w.circuit.Load()),
		Wedged:         w.wedgedAt.Load() != notSet,
		Degraded:       w.degradedAt.Load() != notSet,
		RemoteVerdicts: int(w.remote.Load()),
		RemoteOut:      w.remoteOut.Load(),
		InFlight:       w.inflight.Load(),
		EngineRunning:  -1,
	}
	w.mu.Lock()
	st.CircuitTransitions = w.breaker.moves
	if w.engine.ok {
		st.EngineRunning = w.engine.reading.running
	}
	w.mu.Unlock()
	if lp := w.lastProgress.Load(); lp != notSet {
		st.LastProgress = j.timeAt(lp)
	}
	return st
}
