package store

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Result is what applying one command produced; the FSM returns it from
// Apply, and raft hands it to the writer through ApplyFuture.Response.
type Result struct {
	// ID is the worker the command concerned: the new or existing worker
	// of an AddWorker, the target of RemoveWorker and SetWorkerState.
	ID WorkerID
	// Created is true when an AddWorker registered a new worker (false
	// when the URL was registered already), and when a Seed was applied
	// (false when the registry had been seeded before).
	Created bool
	// Index is the Raft index the command was applied at.
	Index uint64
	// Err is why the command was refused (it then changed nothing): wraps
	// ErrInvalid, ErrUnknownWorker, ErrConflict or ErrUnsupportedVersion.
	Err error
}

// applyCommand is the state transition: it returns the registry after cmd,
// applied at log index index, and the result. It is a pure function of its
// arguments, which is what makes every replica that applies the same log
// reach the same registry.
func applyCommand(reg *Registry, cmd Command, index uint64) (*Registry, Result) {
	switch cmd.Kind {
	case KindAddWorker:
		return addWorker(reg, *cmd.AddWorker)
	case KindRemoveWorker:
		return removeWorker(reg, cmd.RemoveWorker.ID)
	case KindSetWorkerState:
		return setWorkerState(reg, *cmd.SetWorkerState)
	case KindSetRoutingConfig:
		return setRoutingConfig(reg, *cmd.SetRoutingConfig, index)
	case KindSeed:
		return seed(reg, *cmd.Seed, index)
	}
	return reg, Result{Err: fieldError("kind", "unknown command kind %q", cmd.Kind)}
}

func addWorker(reg *Registry, a AddWorker) (*Registry, Result) {
	if existing, ok := reg.WorkerByURL(a.URL); ok {
		return reg, Result{ID: existing.ID, Err: conflict(existing, a)}
	}
	if reg.nextID == math.MaxUint32 {
		return reg, Result{Err: fmt.Errorf("%w: worker ids exhausted", ErrInvalid)}
	}
	role := a.Role
	if role == "" {
		role = RoleRegular
	}
	w := Worker{ID: reg.nextID, URL: a.URL, Role: role, Model: a.Model,
		BootstrapPort: a.BootstrapPort, KVEventsEndpoint: a.KVEventsEndpoint, KVEventsReplayEndpoint: a.KVEventsReplayEndpoint,
		KVEventsTopic: a.KVEventsTopic,
		Labels:        cloneLabels(a.Labels), State: StateActive}
	workers := append(slices.Clip(reg.workers), w) // ids only grow: stays sorted
	return reg.withWorkers(workers, reg.nextID+1), Result{ID: w.ID, Created: true}
}

// conflict says why a re-add of an existing URL contradicts the
// registration, or nil when it is a harmless repeat.
func conflict(w Worker, a AddWorker) error {
	switch {
	case a.Role != "" && a.Role != w.Role:
		return conflictError(w, "role", string(w.Role), string(a.Role))
	case a.Model != "" && a.Model != w.Model:
		return conflictError(w, "model", w.Model, a.Model)
	case a.BootstrapPort != 0 && a.BootstrapPort != w.BootstrapPort:
		return conflictError(w, "bootstrap_port", fmt.Sprint(w.BootstrapPort), fmt.Sprint(a.BootstrapPort))
	case a.KVEventsEndpoint != "" && a.KVEventsEndpoint != w.KVEventsEndpoint:
		return conflictError(w, "kv_events_endpoint", w.KVEventsEndpoint, a.KVEventsEndpoint)
	case a.KVEventsReplayEndpoint != "" && a.KVEventsReplayEndpoint != w.KVEventsReplayEndpoint:
		return conflictError(w, "kv_events_replay_endpoint", w.KVEventsReplayEndpoint, a.KVEventsReplayEndpoint)
	case a.KVEventsTopic != "" && a.KVEventsTopic != w.KVEventsTopic:
		return conflictError(w, "kv_events_topic", w.KVEventsTopic, a.KVEventsTopic)
	case len(a.Labels) > 0 && !maps.Equal(a.Labels, w.Labels):
		return conflictError(w, "labels", fmt.Sprint(w.Labels), fmt.Sprint(a.Labels))
	}
	return nil
}

func conflictError(w Worker, field, have, want string) error {
	return fmt.Errorf("%w: %s is worker %d with %s %q, not %q", ErrConflict, w.URL, w.ID, field, have, want)
}

func removeWorker(reg *Registry, id WorkerID) (*Registry, Result) {
	i, ok := reg.byID[id]
	if !ok {
		return reg, Result{ID: id, Err: unknownWorker(id)}
	}
	workers := slices.Delete(slices.Clone(reg.workers), i, i+1)
	return reg.withWorkers(workers, reg.nextID), Result{ID: id}
}

func setWorkerState(reg *Registry, s SetWorkerState) (*Registry, Result) {
	i, ok := reg.byID[s.ID]
	if !ok {
		return reg, Result{ID: s.ID, Err: unknownWorker(s.ID)}
	}
	if reg.workers[i].State == s.State {
		return reg, Result{ID: s.ID}
	}
	workers := slices.Clone(reg.workers)
	workers[i].State = s.State
	return reg.withWorkers(workers, reg.nextID), Result{ID: s.ID}
}

func unknownWorker(id WorkerID) error {
	return fmt.Errorf("%w: no worker with id %d", ErrUnknownWorker, id)
}

// setRoutingConfig replaces the routing config, unless the command names the
// version it expects (compare-and-set) and the registry holds another.
func setRoutingConfig(reg *Registry, s SetRoutingConfig, index uint64) (*Registry, Result) {
	if s.ExpectIndex != nil && *s.ExpectIndex != reg.routingIndex {
		return reg, Result{Err: &StaleError{What: "the routing config", Have: reg.routingIndex, Want: *s.ExpectIndex}}
	}
	return reg.withRouting(s.Config, index), Result{}
}

// seed applies the command-line seeds once per registry: the routing config
// when none is set, and each worker not registered yet (one registered with
// other settings is left as the operator made it). A registry seeded before
// is left alone, so a worker removed through the admin API stays removed;
// but the workers of the first Seed that carries any are registered even
// when Seeds without workers came first, since in a tier whose replicas
// start together any one of them may seed first, and often only one was
// given --worker-urls.
func seed(reg *Registry, s Seed, index uint64) (*Registry, Result) {
	if reg.seeded && !reg.awaitingWorkerSeed {
		return reg, Result{}
	}
	if reg.seeded && len(s.Workers) == 0 {
		return reg, Result{}
	}
	if reg.routing == nil && s.Routing != nil {
		reg = reg.withRouting(*s.Routing, index)
	}
	for _, a := range s.Workers {
		if next, res := addWorker(reg, a); res.Err == nil {
			reg = next
		}
	}
	return reg.withSeeded(len(s.Workers) == 0), Result{Created: true}
}
