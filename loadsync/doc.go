// Package loadsync shares soft routing state between router replicas: each
// replica's in-flight count per worker, and the prefix-ownership facts
// (block hash -> worker) its routing decisions create.
//
// It is split in two. State is a pure state machine: it never opens a socket,
// starts a goroutine or reads the wall clock. The caller hands it time and
// inbound packets (Tick, Receive, MergeRemoteState) and sends the packets it
// returns to every peer, so the fleet simulator can run the same code on
// virtual time over a simulated network. Gossip is the thin adapter that runs
// a State over a real hashicorp/memberlist cluster: memberlist carries
// liveness, encryption and push/pull; Gossip sends load reports and digest
// packets directly to every live member once per LoadInterval, so the age of
// a peer's view is bounded by that interval plus the network.
//
// Load reports are versioned by (boot epoch, sequence) and travel in one
// packet each (msgReport, report.go) with what goes with them. Once per
// FullReportInterval (a second) a report is full: every non-zero count of
// the origin, split by worker-id range over as many packets as needed
// (dense nibble runs where most workers are busy), and sent again with the
// next report so that one lost copy costs nothing. The reports between are
// steps: the counts that changed since the origin's previous report, so a
// flush 10 ms after the last one carries a change or two, not everything
// since the full report. A receiver exact at the previous report is exact
// after a step; one that lost a step merges the step's counts as the newest
// known for their workers and is exact again with the next cumulative
// delta: the counts that differ from the last full report, sent on the
// regular cadence and, by a replica whose loads change at every flush,
// every second LoadInterval. A cumulative delta makes a receiver holding
// the full report exact from any one delta, whichever earlier packets were
// lost, duplicated or reordered; older packets are ignored, and a worker
// whose count fell back to zero or to its full report's value is reset by
// the next delta that omits it. A receiver that lost every copy of a full
// report merges the deltas' counts as the newest known for their workers
// but stays inexact, for the workers that changed only in that full report,
// until the next one. An origin that stops reporting is dropped after
// LoadTTL; one that memberlist reports as gone is dropped at once (Forget),
// and a delta on the base it had sent brings it back exactly. Receive
// refuses a packet over 65000 bytes, a count outside [0, 2^40] and anything
// that does not decode, changing nothing.
//
// The prefill backlogs ride the same report: steps of the backlogs that
// changed, in 256-byte blocks rounded up, and the full backlogs with each
// full report.
//
// Replicas of different builds share a tier (compat.go, types.go,
// docs/compatibility.md). A replica announces in its node metadata its
// release, the versions of every wire it speaks and the message types it
// reads; Gossip sends each peer only the types it reads, and none a newer
// type it reads supersedes, so a peer of v0.1.0 (which announces nothing
// and reads types 1 to 10) gets the load reports, deltas, digests,
// backlogs, counted answers and calibrations as separate messages of the
// older types, which the State makes only while such a peer is live
// (SetLegacyPeers). A type a replica does not know is skipped and counted
// as unknown, not as a decode error; fields appended to a known message,
// and report sections of unknown kinds, are skipped. CheckJoin refuses a
// peer whose versions of some wire do not overlap ours, naming both
// releases.
//
// Verdicts (a replica's judgement that a worker is wedged or degraded) ride
// the same cadence as soft state: an origin repeats its non-empty set every
// LoadInterval and announces an empty one a few times when they end;
// receivers drop a set on withdrawal, leave, or LoadTTL without refresh.
//
// Calibrations are not soft state: what the engines' answers said of the hits
// a replica predicted (Judged), summed per worker, goes out once with the
// next report at least a LoadInterval after the last that carried some, and
// is applied by each receiver (OnCalibration, counts capped); a lost packet
// loses that interval's corrections, which later answers make again.
//
// Counted answers ride a load report, after its loads, when they changed
// since the last one: which of the tier's placer's answers to this
// replica's questions the report counts (Counted, read before the loads).
// The placer ends its own reservation for each then (OnCounted), so its
// view counts a placed request once; a lost packet leaves those
// reservations to the placer's bound.
//
// Node metadata carries, besides the cluster configuration that CheckJoin
// compares, free-form tags that are not compared: a replica announces there
// where its other services (Raft, the HTTP API) listen.
//
// Ownership digests are bandwidth-bounded: for each routing decision only the
// deepest block and sparse checkpoints at power-of-two depths are queued, and
// facts this replica queued in the last half second or so are skipped, so a
// continuation turn costs one or two facts, and at most log2 of its length
// plus one when its checkpoints are due for a refresh (once a second). Receivers therefore learn
// sparse facts and must match a request by its deepest known block, not by
// the first gap. Each fact carries its span, the blocks of prefix it stands
// for beyond the decision's next shallower fact, so that a receiver can
// charge a worker's cache budget for the whole prefix rather than one block
// per fact. A joining or restarted replica receives the most recent facts by
// memberlist's TCP push/pull. A report's facts fill its last packet.
//
// loadsync imports nothing else of this project: workers are uint32 ids,
// block hashes are uint64, verdict kinds are opaque bytes, and what is
// learned is handed to the caller through the callbacks in Config.
package loadsync
