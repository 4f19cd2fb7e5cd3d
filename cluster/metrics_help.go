package cluster

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help text of every family a replica registers beyond the request
// path's, one line each, served on /metrics. A family registered without
// one here keeps an empty help line, which the tests that scrape a live
// replica refuse.
var _ = exposition.Describe(map[string]string{
	"go_goroutines":                                         "Goroutines that exist now.",
	"go_memstats_heap_alloc_bytes":                          "Bytes of allocated heap objects (reachable, or not yet swept).",
	"go_memstats_sys_bytes":                                 "Bytes of memory the Go runtime obtained from the operating system.",
	"vllm_router_cluster_raft_term":                         "The Raft term this replica is in.",
	"vllm_router_cluster_raft_leader":                       "1 while this replica is the Raft leader, else 0.",
	"vllm_router_cluster_raft_voters":                       "Voters in the latest Raft configuration this replica knows.",
	"vllm_router_cluster_registry_workers":                  "Workers in this replica's copy of the registry.",
	"vllm_router_cluster_registry_loaded":                   "1 once this replica's registry is the cluster's (it serves inference), else 0.",
	"vllm_router_cluster_registry_halted":                   "1 once this replica's registry met a log entry a newer build wrote that this build cannot read: it applies nothing more until a build that reads it starts on its data dir, else 0.",
	"vllm_router_cluster_placer_ask_seconds":                "Time of each question put to the placer (the leader), answered or not: what a cold request waits on this replica for its worker.",
	"vllm_router_cluster_placer_conn_wait_seconds":          "The part of a question to the placer spent waiting for a connection to it (at most 4 are kept; a burst queues for them), for the questions that found no kept one idle.",
	"vllm_router_cluster_placer_holds_ended_total":          "The placer's reservations for its peers' questions, by how they ended: report (the asker's load report said it counts the request), bound (no report said so within the load interval and three flush lags).",
	"vllm_router_cluster_placements_total":                  "Decisions made on the placer's view, and cold decisions (no candidate known to hold the prefix) that did not reach it, by how they were placed: asked (the placer, the leader, chose), here (this replica is the placer: every request of its own), alone (the placer did not answer in time; decided here), for_peer (placed here for a peer).",
	"vllm_router_cluster_members":                           "Live gossip members, this replica included.",
	"vllm_router_cluster_link_refusals_total":               "Connections to the cluster port dropped before Raft or the replicas' HTTP saw them.",
	"vllm_router_cluster_gossip_sent_bytes_total":           "Bytes of gossip packets sent.",
	"vllm_router_cluster_gossip_received_bytes_total":       "Bytes of gossip packets received.",
	"vllm_router_cluster_gossip_sent_messages_total":        "Gossip packets sent.",
	"vllm_router_cluster_gossip_received_messages_total":    "Gossip packets received.",
	"vllm_router_cluster_gossip_state_sent_bytes_total":     "Bytes of push/pull state sent to joining or syncing peers.",
	"vllm_router_cluster_gossip_state_received_bytes_total": "Bytes of push/pull state received from peers.",
	"vllm_router_cluster_gossip_send_errors_total":          "Gossip messages that could not be sent.",
	"vllm_router_cluster_gossip_inbox_dropped_total":        "Received gossip messages dropped because the inbox was full.",
	"vllm_router_cluster_gossip_decode_errors_total":        "Received gossip packets and states that did not decode.",
	"vllm_router_cluster_gossip_unknown_messages_total":     "Received gossip messages of a type this build does not know (a newer build's), skipped: not errors.",
	"vllm_router_cluster_gossip_join_refusals_total":        "Peers refused at join (wire version, block size or gossip key differ).",
	"vllm_router_cluster_gossip_stale_reports_total":        "Load packets ignored as older than, or a copy of, what was held.",
	"vllm_router_cluster_gossip_full_reports_sent_total":    "Load reports sent in full rather than as deltas.",
	"vllm_router_cluster_gossip_inexact_deltas_total":       "Deltas merged without the full report they rest on: the view of that peer is inexact until its next full report.",
	"vllm_router_cluster_gossip_facts_sent_total":           "Prefix-ownership facts sent to peers.",
	"vllm_router_cluster_gossip_facts_learned_total":        "Prefix-ownership facts learned from peers.",
	"vllm_router_cluster_gossip_facts_dropped_total":        "Prefix-ownership facts pushed out of a full send queue before they were sent.",
	"vllm_router_cluster_gossip_lag_p50_seconds":            "Median age of the peers' load state this replica's view equals.",
	"vllm_router_cluster_gossip_lag_p99_seconds":            "99th percentile age of the peers' load state this replica's view equals.",
	"vllm_router_cluster_gossip_lag_seconds":                "Receive time minus send time of each peer's last load report, by origin.",
	"vllm_router_cluster_gossip_report_age_seconds":         "How long ago each peer's last load report arrived, by origin.",
	"vllm_router_cb_state":                                  "Circuit of each worker: 0 closed, 1 open, 2 half-open.",
	"vllm_router_cb_state_transitions_total":                "Moves of each worker's circuit into a state, by worker and the state it moved to.",
	"vllm_router_worker_wedged":                             "1 while a worker is judged wedged (requests in flight, no progress for --wedge-timeout), else 0.",
	"vllm_router_worker_degraded":                           "1 while a worker is judged degraded (token rate below --degrade-ratio of its peers'), else 0.",
})
