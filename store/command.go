package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CommandVersion is the command encoding this build writes. Decode accepts
// versions 1..CommandVersion and refuses newer ones with
// ErrUnsupportedVersion, so a replica running old code stops applying rather
// than silently misreading a command it does not understand.
const CommandVersion = 1

// MaxCommandBytes bounds an encoded command. The field limits keep a valid
// command far below it.
const MaxCommandBytes = 64 << 10

// CommandKind says which payload a Command carries.
type CommandKind string

// The command kinds.
const (
	KindAddWorker        CommandKind = "add_worker"
	KindRemoveWorker     CommandKind = "remove_worker"
	KindSetWorkerState   CommandKind = "set_worker_state"
	KindSetRoutingConfig CommandKind = "set_routing_config"
	KindSeed             CommandKind = "seed"
)

// Command is one write to the registry, the unit of the Raft log. Exactly
// one payload is set, the one Kind names. Build commands with NewAddWorker
// and friends; the zero value is invalid.
type Command struct {
	Version          int               `json:"v"`
	Kind             CommandKind       `json:"kind"`
	AddWorker        *AddWorker        `json:"add_worker,omitempty"`
	RemoveWorker     *RemoveWorker     `json:"remove_worker,omitempty"`
	SetWorkerState   *SetWorkerState   `json:"set_worker_state,omitempty"`
	SetRoutingConfig *SetRoutingConfig `json:"set_routing_config,omitempty"`
	Seed             *Seed             `json:"seed,omitempty"`
}

// AddWorker registers a worker, idempotently by normalised URL: adding a URL
// that is registered returns the existing id, unless the command contradicts
// the registration (a different role, or a model, bootstrap port or labels
// that are given and differ), which is ErrConflict. An empty Role means
// RoleRegular for a new worker and "any" for an existing one.
type AddWorker struct {
	URL           string `json:"url"`
	Role          Role   `json:"role,omitempty"`
	Model         string `json:"model,omitempty"`
	BootstrapPort int    `json:"bootstrap_port,omitempty"`
	// KVEventsEndpoint: Worker.KVEventsEndpoint.
	KVEventsEndpoint string `json:"kv_events_endpoint,omitempty"`
	// KVEventsReplayEndpoint: Worker.KVEventsReplayEndpoint.
	KVEventsReplayEndpoint string `json:"kv_events_replay_endpoint,omitempty"`
	// KVEventsTopic: Worker.KVEventsTopic.
	KVEventsTopic string            `json:"kv_events_topic,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// RemoveWorker removes a worker; its id is never handed out again.
type RemoveWorker struct {
	ID WorkerID `json:"id"`
}

// SetWorkerState drains or re-activates a worker.
type SetWorkerState struct {
	ID    WorkerID    `json:"id"`
	State WorkerState `json:"state"`
}

// SetRoutingConfig replaces the cluster-wide routing configuration. With
// ExpectIndex set it is a compare-and-set: it applies only while the
// registry's RoutingIndex is *ExpectIndex (0: no config was ever set), and
// is otherwise refused with ErrConflict. Without it (the log of earlier
// versions) it applies unconditionally.
type SetRoutingConfig struct {
	Config      RoutingConfig `json:"config"`
	ExpectIndex *uint64       `json:"expect_index,omitempty"`
}

// MaxSeedWorkers bounds the workers of one Seed command.
const MaxSeedWorkers = 256

// Seed is what a replica's command line contributes to a registry
// (--worker-urls, --prefill, --decode, and the routing flags), applied
// once per registry: the first Seed applied sets the routing config when
// none is set and marks the registry seeded; the first Seed that carries
// workers registers them; every other Seed changes nothing.
type Seed struct {
	Routing *RoutingConfig `json:"routing,omitempty"`
	Workers []AddWorker    `json:"workers,omitempty"`
}

// NewAddWorker returns the command that applies a.
func NewAddWorker(a AddWorker) Command {
	return Command{Version: CommandVersion, Kind: KindAddWorker, AddWorker: &a}
}

// NewRemoveWorker returns the command that removes worker id.
func NewRemoveWorker(id WorkerID) Command {
	return Command{Version: CommandVersion, Kind: KindRemoveWorker, RemoveWorker: &RemoveWorker{ID: id}}
}

// NewSetWorkerState returns the command that sets worker id's state.
func NewSetWorkerState(id WorkerID, state WorkerState) Command {
	p := &SetWorkerState{ID: id, State: state}
	return Command{Version: CommandVersion, Kind: KindSetWorkerState, SetWorkerState: p}
}

// NewSetRoutingConfig returns the command that sets the routing config.
func NewSetRoutingConfig(c RoutingConfig) Command {
	p := &SetRoutingConfig{Config: c}
	return Command{Version: CommandVersion, Kind: KindSetRoutingConfig, SetRoutingConfig: p}
}

// NewCompareAndSetRoutingConfig returns the command that sets the routing
// config if the registry's RoutingIndex is still expect.
func NewCompareAndSetRoutingConfig(c RoutingConfig, expect uint64) Command {
	p := &SetRoutingConfig{Config: c, ExpectIndex: &expect}
	return Command{Version: CommandVersion, Kind: KindSetRoutingConfig, SetRoutingConfig: p}
}

// NewSeed returns the command that seeds a registry once.
func NewSeed(s Seed) Command {
	return Command{Version: CommandVersion, Kind: KindSeed, Seed: &s}
}

// Encode validates and normalises c and returns its log encoding. Errors
// wrap ErrInvalid (a *FieldError names the field) or ErrUnsupportedVersion.
func (c Command) Encode() ([]byte, error) {
	n, err := c.Normalize()
	if err != nil {
		return nil, err
	}
	return json.Marshal(n)
}

// Decode parses and validates a command from the log or from a stranger.
// Unknown fields, trailing data and oversized input are refused. The result
// is normalised, as Normalize returns it.
func Decode(data []byte) (Command, error) {
	if len(data) > MaxCommandBytes {
		return Command{}, fmt.Errorf("%w: command of %d bytes exceeds %d", ErrInvalid, len(data), MaxCommandBytes)
	}
	if err := checkVersion(data, "command", CommandVersion); err != nil {
		return Command{}, err
	}
	var c Command
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("%w: decode command: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Command{}, fmt.Errorf("%w: trailing data after command", ErrInvalid)
	}
	return c.Normalize()
}

// checkVersion refuses a document of a version newer than this build reads
// before its fields are: a newer build's has fields this one does not know,
// and must be named for its version rather than for a field.
func checkVersion(data []byte, what string, newest int) error {
	var head struct {
		Version int `json:"v"`
	}
	if json.Unmarshal(data, &head) == nil && head.Version > newest {
		return fmt.Errorf("%w: %s version %d, this build reads up to %d (a newer build wrote it)",
			ErrUnsupportedVersion, what, head.Version, newest)
	}
	return nil
}

// Normalize checks c and returns a copy in canonical form (normalised URL,
// copied labels). It never modifies c or what c points to.
func (c Command) Normalize() (Command, error) {
	if c.Version < 1 {
		return Command{}, fieldError("v", "must be >= 1")
	}
	if c.Version > CommandVersion {
		return Command{}, fmt.Errorf("%w: command version %d, this build reads up to %d (a newer build wrote it)",
			ErrUnsupportedVersion, c.Version, CommandVersion)
	}
	if err := c.checkPayloadCount(); err != nil {
		return Command{}, err
	}
	return c.normalizePayload()
}

func (c Command) checkPayloadCount() error {
	n := 0
	for _, set := range []bool{c.AddWorker != nil, c.RemoveWorker != nil,
		c.SetWorkerState != nil, c.SetRoutingConfig != nil, c.Seed != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fieldError("kind", "a command carries exactly one payload, got %d", n)
	}
	return nil
}

func (c Command) normalizePayload() (Command, error) {
	out := Command{Version: c.Version, Kind: c.Kind}
	var err error
	switch {
	case c.Kind == KindAddWorker && c.AddWorker != nil:
		out.AddWorker, err = c.AddWorker.normalize()
	case c.Kind == KindRemoveWorker && c.RemoveWorker != nil:
		out.RemoveWorker, err = c.RemoveWorker.normalize()
	case c.Kind == KindSetWorkerState && c.SetWorkerState != nil:
		out.SetWorkerState, err = c.SetWorkerState.normalize()
	case c.Kind == KindSetRoutingConfig && c.SetRoutingConfig != nil:
		out.SetRoutingConfig, err = c.SetRoutingConfig.normalize()
	case c.Kind == KindSeed && c.Seed != nil:
		out.Seed, err = c.Seed.normalize()
	default:
		err = fieldError("kind", "%q does not name the payload the command carries", c.Kind)
	}
	if err != nil {
		return Command{}, err
	}
	return out, nil
}

func (a *AddWorker) normalize() (*AddWorker, error) {
	u, err := NormalizeURL(a.URL)
	if err != nil {
		return nil, err
	}
	if a.Role != "" && !a.Role.Valid() {
		return nil, fieldError("role", "%q is not one of regular, prefill, decode", a.Role)
	}
	if err := validateModel(a.Model); err != nil {
		return nil, err
	}
	if err := validateBootstrapPort(a.BootstrapPort); err != nil {
		return nil, err
	}
	ep, err := NormalizeKVEventsEndpoint(a.KVEventsEndpoint)
	if err != nil {
		return nil, err
	}
	replay, err := NormalizeEndpointField("kv_events_replay_endpoint", a.KVEventsReplayEndpoint)
	if err != nil {
		return nil, err
	}
	if err := ValidateKVEventsTopic(a.KVEventsTopic); err != nil {
		return nil, err
	}
	if err := validateLabels(a.Labels); err != nil {
		return nil, err
	}
	n := *a
	n.URL, n.Labels, n.KVEventsEndpoint, n.KVEventsReplayEndpoint = u, cloneLabels(a.Labels), ep, replay
	return &n, nil
}

func (r *RemoveWorker) normalize() (*RemoveWorker, error) {
	if r.ID == 0 {
		return nil, fieldError("id", "must be a worker id (>= 1)")
	}
	n := *r
	return &n, nil
}

func (s *SetWorkerState) normalize() (*SetWorkerState, error) {
	if s.ID == 0 {
		return nil, fieldError("id", "must be a worker id (>= 1)")
	}
	if !s.State.Valid() {
		return nil, fieldError("state", "%q is not one of active, draining", s.State)
	}
	n := *s
	return &n, nil
}

func (s *SetRoutingConfig) normalize() (*SetRoutingConfig, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, err
	}
	n := *s
	n.Config = s.Config.clone()
	if s.ExpectIndex != nil {
		e := *s.ExpectIndex
		n.ExpectIndex = &e
	}
	return &n, nil
}

func (s *Seed) normalize() (*Seed, error) {
	if len(s.Workers) > MaxSeedWorkers {
		return nil, fieldError("workers", "more than %d workers in one seed", MaxSeedWorkers)
	}
	n := &Seed{Workers: make([]AddWorker, 0, len(s.Workers))}
	if s.Routing != nil {
		if err := s.Routing.Validate(); err != nil {
			return nil, err
		}
		c := s.Routing.clone()
		n.Routing = &c
	}
	for _, a := range s.Workers {
		w, err := a.normalize()
		if err != nil {
			return nil, err
		}
		n.Workers = append(n.Workers, *w)
	}
	return n, nil
}
