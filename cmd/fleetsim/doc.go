// Command fleetsim simulates R router replicas in front of W inference workers
// on virtual time, running the router's real routing code (package affinity,
// and loadsync's gossip state machine over a simulated network), and reports
// what each routing policy and each way of sharing state between replicas
// does to the fleet: prefix-cache hit rate, time to first token, throughput,
// load balance, recomputed prompt tokens and gossip bandwidth; with --pd, the
// prefill workers' queue depth, and for agentic sessions the prompt tokens
// computed per rollout and rollouts per minute. The judged_* columns are the
// replicas' own attribution against the engines' answers, what a real
// replica exports as vllm_router_false_hits_total,
// vllm_router_lost_hits_total{cause} and vllm_router_cold_misses_total.
// --kill ID:AT kills a worker on virtual time: its streams resume elsewhere
// as the router's do (up to --migration-limit times), and the table adds
// the cuts, the retries, the resumes, the failures and the resume pause.
//
//	fleetsim --trace FILE | --agentic [--sessions N --turns T ...]
//	         --workers W --replicas 1,2,4,8 --policies cache_aware,round_robin
//	         --sync gossip,none,shared [--pd P:D] [--limit N] [--seed S] [--json OUT]
//
// Every combination of --policies, --sync and --replicas is one run; runs are
// deterministic, so the same flags print the same table. The simulation
// itself lives in package sim/fleet.
package main
