package health

// CircuitState is the state of a worker's circuit breaker. Its numeric values
// are those of the vllm_router_cb_state gauge.
type CircuitState uint8

const (
	// CircuitClosed lets all traffic through.
	CircuitClosed CircuitState = 0
	// CircuitOpen lets no traffic through.
	CircuitOpen CircuitState = 1
	// CircuitHalfOpen lets a few trial requests through.
	CircuitHalfOpen CircuitState = 2
)

// String returns "closed", "open" or "half_open".
func (s CircuitState) String() string {
	switch s {
	case CircuitClosed:
		return "closed"
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half_open"
	}
	return "unknown"
}

// breakerPolicy holds the breaker's thresholds, copied from Config.
type breakerPolicy struct {
	failures  int   // consecutive failures that open a closed circuit
	successes int   // trial successes that close a half-open circuit
	trials    int   // concurrent trial requests a half-open circuit admits
	timeout   int64 // nanoseconds a circuit stays open before half-opening
	disabled  bool  // request outcomes never open a circuit (--disable-circuit-breaker)
}

// breaker is one worker's circuit breaker: a pure state machine on a logical
// time in nanoseconds. Every transition starts a new generation; an outcome
// counts only for the generation its request was admitted in, so a request sent
// before the circuit opened cannot close it later. Not safe for concurrent use:
// the owning worker guards it with its mutex.
type breaker struct {
	policy      breakerPolicy
	state       CircuitState
	gen         uint64
	failures    int   // consecutive failures while closed
	successes   int   // trial successes while half-open
	trialsInUse int   // admitted trials not yet ended, while half-open
	openedAt    int64 // when the circuit last opened
	// moves counts the transitions into each state, for
	// vllm_router_cb_state_transitions_total.
	moves [3]uint64
}

// admit asks to send one request. In a half-open circuit it reserves a trial
// slot, which the matching record call gives back.
func (b *breaker) admit() (gen uint64, trial, ok bool) {
	switch b.state {
	case CircuitClosed:
		return b.gen, false, true
	case CircuitHalfOpen:
		if b.trialsInUse < b.policy.trials {
			b.trialsInUse++
			return b.gen, true, true
		}
	}
	return 0, false, false
}

// record applies the outcome of a request admitted in generation gen and
// reports whether the state changed.
func (b *breaker) record(o Outcome, gen uint64, trial bool, now int64) bool {
	if gen != b.gen {
		return false
	}
	if trial {
		b.trialsInUse--
	}
	switch {
	case o == OutcomeCanceled:
		return false
	case b.state == CircuitClosed:
		return b.recordClosed(o, now)
	case b.state == CircuitHalfOpen:
		return b.recordHalfOpen(o, now)
	}
	return false
}

func (b *breaker) recordClosed(o Outcome, now int64) bool {
	if o == OutcomeSuccess {
		b.failures = 0
		return false
	}
	b.failures++
	if b.failures < b.policy.failures || b.policy.disabled {
		return false
	}
	b.moveTo(CircuitOpen, now)
	return true
}

func (b *breaker) recordHalfOpen(o Outcome, now int64) bool {
	if o != OutcomeSuccess {
		b.moveTo(CircuitOpen, now)
		return true
	}
	b.successes++
	if b.successes < b.policy.successes {
		return false
	}
	b.moveTo(CircuitClosed, now)
	return true
}

// trip opens the circuit whatever its state, for a wedge or degrade verdict.
// An already open circuit keeps its opening time, so the half-open step is not
// postponed by a verdict that started after the circuit opened.
func (b *breaker) trip(now int64) bool {
	if b.state == CircuitOpen {
		return false
	}
	b.moveTo(CircuitOpen, now)
	return true
}

// expire half-opens a circuit that has been open for the policy's timeout.
func (b *breaker) expire(now int64) bool {
	if b.state != CircuitOpen || now-b.openedAt < b.policy.timeout {
		return false
	}
	b.moveTo(CircuitHalfOpen, now)
	return true
}

// halfOpen lets trials through an open circuit at once, for a worker whose
// progress came back: there is no point in waiting out the timeout.
func (b *breaker) halfOpen(now int64) bool {
	if b.state != CircuitOpen {
		return false
	}
	b.moveTo(CircuitHalfOpen, now)
	return true
}

// close closes the circuit whatever its state, for a worker that answered a
// recovery probe: the probe was the trial.
func (b *breaker) close(now int64) bool {
	if b.state == CircuitClosed {
		return false
	}
	b.moveTo(CircuitClosed, now)
	return true
}

func (b *breaker) moveTo(s CircuitState, now int64) {
	b.state = s
	b.moves[s]++
	b.gen++
	b.failures, b.successes, b.trialsInUse = 0, 0, 0
	if s == CircuitOpen {
		b.openedAt = now
	}
}

// word packs the state and generation for lock-free readers.
func (b *breaker) word() uint64 { return b.gen<<2 | uint64(b.state) }

// trialsFree is the number of trial slots a half-open circuit has left.
func (b *breaker) trialsFree() int32 {
	if b.state != CircuitHalfOpen {
		return 0
	}
	return int32(b.policy.trials - b.trialsInUse)
}

func stateOf(word uint64) CircuitState { return CircuitState(word & 3) }
func genOf(word uint64) uint64         { return word >> 2 }
