package fleet

import (
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/sim"
)

// phase is where a request stands.
type phase uint8

const (
	// phaseServe: on an ordinary worker, prefill and decode in one engine.
	phaseServe phase = iota
	// phasePrefill: on a prefill worker, computing the prompt and one token.
	phasePrefill
	// phaseDecode: on a decode worker, with the prompt's KV transferred.
	phaseDecode
)

// request is one arrival on its way through the fleet.
type request struct {
	id      sim.RequestID
	arrival Arrival
	phase   phase

	// guard counts the request on the worker that serves it to the end
	// (the decode worker of a split fleet); prefillGuard counts it on its
	// prefill worker until the prefill answers.
	guard, prefillGuard *affinity.Guard
	// decodeWorker is the index of the decode worker chosen at arrival.
	decodeWorker int
	// transferred is the prompt length in tokens that the prefill computed
	// and the decode worker receives.
	transferred int
	// replica made the (prefill) decision, and decided is what it knew;
	// the routed worker's answer judges it.
	replica *replica
	decided core.Decided
	// areq is the request as its replica prepared it; asking is its
	// question to the placer, while asked, and placed the placer's choice
	// (refused: the placer placed nothing).
	areq    *affinity.Request
	asking  *core.Asking
	placed  affinity.Decision
	refused bool
	// oracleOwner and oracleHit are the oracle's decision at arrival.
	oracleOwner affinity.WorkerID
	oracleHit   bool
	// ticket is the request's place at its replica's door, from its
	// arrival to its end; nil without a door.
	ticket *admission.Ticket

	// on is the worker whose engine holds the request (its routed worker
	// in a split fleet), nil while no engine does: at its door, asking
	// the placer, between attempts.
	on *worker
	// pool is what its (prefill) decision chooses from: its replica's
	// candidates less the workers that streamed to it and were cut.
	pool *affinity.Pool
	// stream is what its client has of the answer, carried across cuts.
	stream stream
}

// doorWait is how long the request waited at its replica's door.
func (r *request) doorWait() time.Duration {
	if r.ticket == nil {
		return 0
	}
	return r.ticket.Waited()
}

// release gives back every guard the request still holds.
func (r *request) release() {
	r.prefillGuard.Release()
	r.guard.Release()
}
