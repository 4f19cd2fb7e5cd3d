package pathmetrics

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help texts of the admission families (admission.go).
var _ = exposition.Describe(map[string]string{
	"vllm_router_admission_limit":          "The engines' bound on this replica's requests in flight, from their saturation signal (-1: none known).",
	"vllm_router_admission_queued":         "Requests waiting for admission on this replica, by class.",
	"vllm_router_admission_in_flight":      "Requests admitted and not yet ended on this replica, by class.",
	"vllm_router_admission_peer_queued":    "Requests waiting for admission at the peers, by class, from their queue reports.",
	"vllm_router_admission_admitted_total": "Requests admitted, by class and tenant (the first 32 tenants seen; the others are other).",
	"vllm_router_admission_refused_total":  "Requests refused at admission, by class, tenant and reason (queue_full, shed, queue_timeout, client_gone: the client left while queued).",
	"vllm_router_admission_queue_seconds":  "Time a request waited for admission, by class and tenant.",
	"vllm_router_admission_tenant_bytes":   "Bytes the tenants with requests here take in admission's tables, at most 4 MiB; past it new tenants share the tenant (overflow).",
})
