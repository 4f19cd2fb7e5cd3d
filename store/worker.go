package store

import (
	"maps"
	"strings"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// WorkerID names a worker inside the cluster. The FSM assigns ids in order
// starting at 1 and never reuses one, so an id seen in an old gossip message
// can never be mistaken for a newer worker. 0 means "no worker".
type WorkerID uint32

// Role is what a worker does in a request's life.
type Role string

// The roles a worker can have. Regular workers serve whole requests; with
// prefill/decode disaggregation a request visits a prefill worker and then a
// decode worker.
const (
	RoleRegular Role = "regular"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool {
	return r == RoleRegular || r == RolePrefill || r == RoleDecode
}

// WorkerState is the administrative state of a worker. Health is not part of
// it: health is each replica's own observation and never goes through Raft.
type WorkerState string

// The administrative states. A draining worker receives no new requests but
// finishes the ones it holds.
const (
	StateActive   WorkerState = "active"
	StateDraining WorkerState = "draining"
)

// Valid reports whether s is one of the known states.
func (s WorkerState) Valid() bool { return s == StateActive || s == StateDraining }

// Worker is one inference engine in the registry. Values handed out by a
// Registry are shared with it: treat them, Labels included, as read-only.
type Worker struct {
	// ID is assigned by the FSM; see WorkerID.
	ID WorkerID `json:"id"`
	// URL is the normalised base URL: lowercase scheme and host, an explicit
	// port, no trailing slash. It identifies the worker for idempotent adds.
	URL string `json:"url"`
	// Role defaults to RoleRegular.
	Role Role `json:"role"`
	// Model is the model the worker serves; "" declares none, and such a
	// worker is taken to serve any model.
	Model string `json:"model"`
	// BootstrapPort is the KV-transfer bootstrap port of a prefill worker in
	// the SGLang protocol; 0 when unused.
	BootstrapPort int `json:"bootstrap_port"`
	// KVEventsEndpoint is the engine's KV-event PUB socket, tcp://host:port,
	// for a router in --kv-events mode; "" takes the default (the worker's
	// host, port 5557).
	KVEventsEndpoint string `json:"kv_events_endpoint,omitempty"`
	// KVEventsReplayEndpoint is the engine's replay socket, tcp://host:port;
	// "" takes the default (the event socket's port plus the router's
	// --kv-events-replay-offset, on the event socket's host or, for an
	// engine that dials the tier, the worker's).
	KVEventsReplayEndpoint string `json:"kv_events_replay_endpoint,omitempty"`
	// KVEventsTopic is the topic the engine's events come under when it
	// dials a router's bound socket (--kv-events-bind), for an engine its
	// topic would not otherwise name (kvevents/topic.go); "" when unset.
	KVEventsTopic string `json:"kv_events_topic,omitempty"`
	// Labels are free-form operator tags, carried but not interpreted.
	Labels map[string]string `json:"labels,omitempty"`
	// State is StateActive or StateDraining.
	State WorkerState `json:"state"`
}

// Limits on what a stranger may put into the registry. They keep the Raft
// log and the snapshots small and the admin listing readable.
const (
	MaxURLBytes        = 2048
	MaxModelBytes      = 512
	MaxLabels          = 64
	MaxLabelKeyBytes   = 128
	MaxLabelValueBytes = 512
)

// NormalizeURL validates a worker base URL and returns its canonical form
// (see workerurl.Parse): scheme http or https, a host and a port (80 or 443
// when left out), no user info, query or fragment; scheme and host
// lowercased, IP literals in one spelling, trailing slashes removed from the
// path. Two spellings of one endpoint normalise alike, so they are one
// worker. Errors are *FieldError for field "url".
func NormalizeURL(raw string) (string, error) {
	u, err := workerurl.Parse(raw)
	if err != nil {
		return "", fieldError("url", "%s", strings.TrimPrefix(err.Error(), workerurl.ErrInvalid.Error()+": "))
	}
	return u.String(), nil
}

func validateModel(model string) error {
	if len(model) > MaxModelBytes {
		return fieldError("model", "longer than %d bytes", MaxModelBytes)
	}
	return nil
}

func validateBootstrapPort(port int) error {
	if port < 0 || port > 65535 {
		return fieldError("bootstrap_port", "%d is not in 0..65535", port)
	}
	return nil
}

func validateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fieldError("labels", "more than %d labels", MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyBytes {
			return fieldError("labels", "key %q must be 1..%d bytes", k, MaxLabelKeyBytes)
		}
		if len(v) > MaxLabelValueBytes {
			return fieldError("labels", "value of %q longer than %d bytes", k, MaxLabelValueBytes)
		}
	}
	return nil
}

// cloneLabels copies labels so a registry never shares a map with a caller;
// an empty map becomes nil so that equal registries compare equal.
func cloneLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	return maps.Clone(labels)
}
