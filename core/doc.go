// Package core is the routing state of one router replica, with no I/O and
// no clock of its own: the load table, the ownership index, the routers
// bound to them, the replica's side of the gossip (loadsync.State), the
// trust boundary on what peers send, forget-on-unhealthy, the peers' share
// of a burst, the residency of LoRA adapters (the engines' readings and the
// peers' reports of them, on a gossip channel of its own), and the
// attribution of every decision against the engine's answer.
//
// It is driven by events: the registry changed (SetRegistry), workers'
// health changed (HealthChanged), the number of live peers changed
// (SetPeers), decide for this request (Decide), the engine answered
// (Answered), a tick at now (Tick, Expire), a gossip packet at now
// (Receive). The product (package cluster) drives it with real time,
// memberlist and Raft; the simulator (sim/fleet) drives the same type on
// virtual time with modelled delays, so a simulated figure is a figure of
// the shipped wiring. The clock it is given (Config.Clock) stamps index
// facts and the peer share; it never reads the time otherwise.
//
// Two protocols of a replica are objects of their own here, so that both
// drivers run them rather than each writing them again: the placement of
// a cold request by the tier's placer (Placement: begin, answered,
// refused, silent, serve) and the admission door (Door: its cadence, its
// cost rule, its queue reports). Their drivers only carry messages and
// move time.
//
// Concurrency: every method is safe for concurrent use; Decide and
// Answered run on the request path and take no lock of their own.
package core
