// Package fleet simulates a router tier in front of a fleet of inference
// workers, on virtual time, running the real routing code: R router
// replicas, each the product's replica core (core: its load table,
// ownership index, routers, gossip state, peer filtering and peer share,
// and the attribution of its decisions), in front of W simulated engines
// (package sim), fed by a trace or
// by closed-loop agentic sessions (package workload). A load balancer in
// front of the replicas sends every request to a replica chosen uniformly at
// random, so the turns of one conversation land on different replicas and
// affinity has to hold across them.
//
// How the replicas share what they know is the experiment: SyncNone keeps
// them independent (own counts, own index), SyncGossip runs loadsync's pure
// State on every replica and carries its packets between them over a
// simulated network with a delay and a loss rate, and SyncShared gives all of
// them one load table and one index (exact loads, the upper bound). With a
// prefill/decode split, every request is routed twice as the proxy does it
// (the prefill policy and the decode policy, both guards taken at arrival),
// prefilled with one output token, then decoded with the prompt's KV
// transferred.
//
// Every run is also routed by an oracle: one all-knowing replica that holds
// every decision of every replica in one index and sees the exact loads, and
// that routes nothing. Each request the oracle would have routed as a hit and
// the tier did not is attributed to a cause (Lost), so a regression of the
// tier explains itself. Each replica's core also judges its own decisions
// by the engine's answer, as a real replica does (Judged: false hits, lost
// hits by cause, cold misses), knowing nothing an oracle knows.
//
// The timings are the product's: a decision's ownership facts wait in the
// core's gossip state until its next report (GossipFlushInterval after the
// last one while its loads change, else GossipInterval, each replica's phase
// spread over one interval), travel GossipDelay, and are merged when
// they arrive; a request holds its worker for as long as the engine takes.
//
// With Door (on in the fleetsim command by default, as in the router) each
// replica runs the router's admission door (core.Door, with
// admission.DefaultConfig) before it routes: it reads every
// engine's running, waiting and KV usage every EngineScrapeInterval, sets
// its limit every core.DoorRefreshEvery, and trades queue reports with its
// load reports; a request waits at the door while the engines, by its
// replica's readings, run all they can, and that wait is part of its TTFT.
//
// With Placer, replica 0 is the tier's placer and every replica runs the
// router's placement protocol (core.Placement): a cold request's question
// and the placer's answer travel GossipDelay each way. PlacerAnswerLoss
// loses a share of the answers: the asker then decides alone at
// PlacerTimeout and asks that placer nothing for core.PlacerQuiet, on
// virtual time, as a router replica does on the wall clock.
//
// With Kills, workers die on virtual time, and the tier learns of it at
// once: every replica drops the dead worker from its candidates, its
// registry and its index, as the registry removing it would, and the
// requests its engine held are cut. One cut before its first token is
// retried elsewhere after the router's backoff; one cut after resumes as the
// router's migration does (proxy/migrate.go): a continuation whose prompt is
// the original one followed by the text generated so far, asking for the
// tokens not generated yet, routed by the same replica among the live
// workers its stream has not used, so that the engines' prefix caches give
// it the hits its conversation's blocks would, up to MigrationLimit times.
// Nothing is lost silently: the Result counts the cuts, the retries, the
// resumes and the failures, the pause from a cut to the continuation's
// first token, and the tokens the clients of completed requests got.
//
// The routed (prefill) workers' waiting queues are read every virtual second
// (an event that changes nothing), and closed-loop sessions count as rollouts
// when their last turn completes: the figures of the seed's P/D collapse
// (queue depth, prompt tokens computed per rollout, rollouts per minute).
//
// The simulation is a single-threaded discrete-event loop over a binary heap
// of events ordered by (time, sequence number): arrivals, engine steps, gossip
// ticks, packet deliveries, kills and queue samples. All randomness comes from the seed, so the
// same Config and workload give the same Result, byte for byte. Run starts no
// goroutine; independent runs may execute concurrently.
package fleet
