package proxy

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/proxy/catalog"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// Worker roles, as the registry names them.
const (
	RoleRegular = "regular"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Worker is what the proxy knows of a worker from the registry.
type Worker struct {
	ID            affinity.WorkerID
	URL           string
	Role          string
	Model         string // "" serves any model
	BootstrapPort int
	Draining      bool
}

// member is a worker inside a view, with its pooled connections.
type member struct {
	Worker
	up       *upstream
	base     workerurl.URL // the parsed URL: where to dial, the Host header, the base path
	addr     string        // base.Addr(): the Host header
	models   []string      // what it serves; empty = any model
	counters *pathmetrics.WorkerCounters
}

type poolKey struct{ role, model string }

// view is an immutable picture of the workers, rebuilt when the registry or
// a worker's eligibility changes, never on the request path.
type view struct {
	members  map[affinity.WorkerID]*member
	ordered  []*member
	pools    map[poolKey]*affinity.Pool // eligible workers per role and model
	anyModel map[string]*affinity.Pool  // eligible workers per role that declare no model
	serves   map[poolKey]bool           // a model some worker of the role declares
	hasAny   map[string]bool            // a role has workers that declare no model
	all      map[string]*affinity.Pool  // every eligible worker of a role, for requests that name no model
	eligible int
	// adapters are the models some worker lists as a LoRA adapter (its
	// /v1/models names a parent model); lora, per role, the eligible
	// workers that list one: where an adapter no worker has is loaded.
	adapters map[string]bool
	lora     map[string]*affinity.Pool
}

// labels are what the metrics label each member's series with, by id.
func (v *view) labels() map[affinity.WorkerID]pathmetrics.Worker {
	out := make(map[affinity.WorkerID]pathmetrics.Worker, len(v.members))
	for id, m := range v.members {
		out[id] = pathmetrics.Worker{URL: m.URL, Role: m.Role}
	}
	return out
}

// isAdapter reports whether model is a LoRA adapter of some worker.
func (v *view) isAdapter(model string) bool { return v.adapters[model] }

// pool returns the candidates for a request of role for model.
func (v *view) pool(role, model string) (*affinity.Pool, error) {
	if model == "" {
		if p := v.all[role]; p != nil && p.Len() > 0 {
			return p, nil
		}
		return nil, failure.Errorf(failure.ErrNoWorker, "no healthy %s worker is available", role)
	}
	if p, ok := v.pools[poolKey{role, model}]; ok {
		return p, nil
	}
	if p := v.anyModel[role]; p != nil && p.Len() > 0 {
		return p, nil
	}
	if v.serves[poolKey{role, model}] || v.hasAny[role] {
		return nil, failure.Errorf(failure.ErrNoWorker, "no healthy %s worker is available for model %q", role, model)
	}
	if len(v.members) == 0 {
		return nil, failure.Errorf(failure.ErrNoWorker, "no worker is registered yet")
	}
	return nil, failure.Errorf(failure.ErrModelNotFound, "the model %q does not exist", model)
}

// Fleet publishes views. Rebuilds are serialised; readers never lock.
type Fleet struct {
	loads       *affinity.LoadTable
	eligible    func(affinity.WorkerID) bool
	onRemove    func(affinity.WorkerID)
	dialTimeout time.Duration
	idleTimeout time.Duration        // how long a pooled connection may stay idle; 0 keeps the upstream's default
	maxIdle     int                  // idle connections kept per worker: 256, so a burst of that many in flight redials nothing
	hosts       workerurl.HostPolicy // checked on each worker's URL
	dialer      *workerurl.Dialer    // dials every connection to a worker
	log         *slog.Logger

	// onPublish hears of every new view (metrics keep per-worker gauges).
	onPublish func(*view)
	// counters returns a worker's own metrics.
	counters func(Worker) *pathmetrics.WorkerCounters

	// refreshModels asks every worker's /v1/models at every discovery
	// round, not only until it answers once: adapters loaded or unloaded
	// at run time are seen within a round (a worker of a registry model
	// then also serves the adapters it lists).
	refreshModels bool

	mu         sync.Mutex
	workers    []Worker
	ups        map[affinity.WorkerID]*upstream
	discovered map[affinity.WorkerID]catalog.Served
	measured   map[affinity.WorkerID]bool // KV capacity known
	current    atomic.Pointer[view]
	wake       chan struct{} // signalled when the worker list changes
}

// newFleet returns an empty fleet. eligible says whether health allows a
// worker traffic; onRemove is told of workers that left the registry.
func newFleet(loads *affinity.LoadTable, eligible func(affinity.WorkerID) bool, onRemove func(affinity.WorkerID),
	dialTimeout time.Duration, hosts workerurl.HostPolicy, dialer *workerurl.Dialer, log *slog.Logger) *Fleet {
	f := &Fleet{loads: loads, eligible: eligible, onRemove: onRemove, dialTimeout: dialTimeout, maxIdle: 256, hosts: hosts, dialer: dialer, log: log,
		ups: map[affinity.WorkerID]*upstream{}, discovered: map[affinity.WorkerID]catalog.Served{}, measured: map[affinity.WorkerID]bool{}, wake: make(chan struct{}, 1)}
	f.current.Store(&view{members: map[affinity.WorkerID]*member{}})
	return f
}

func (f *Fleet) view() *view { return f.current.Load() }

// SetWorkers replaces the registry's worker list and republishes the view.
func (f *Fleet) SetWorkers(ws []Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = slices.Clone(ws)
	slices.SortFunc(f.workers, func(a, b Worker) int { return int(a.ID) - int(b.ID) })
	f.syncUpstreams()
	f.publish()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// changed is signalled (coalesced) when the worker list changes.
func (f *Fleet) changed() <-chan struct{} { return f.wake }

// Refresh republishes the view after a change of eligibility.
func (f *Fleet) Refresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publish()
}

// setDiscovered records the models worker id listed on its /v1/models,
// and publishes a view when they changed.
func (f *Fleet) setDiscovered(id affinity.WorkerID, models catalog.Served) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ups[id] == nil {
		return // it left meanwhile
	}
	if old, ok := f.discovered[id]; ok && old.Equal(models) {
		return
	}
	f.discovered[id] = models
	f.publish()
}

// addAdapter records that worker id serves the adapter name, loaded there
// by the router, before its /v1/models is asked again.
func (f *Fleet) addAdapter(id affinity.WorkerID, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ups[id] == nil {
		return
	}
	s := f.discovered[id]
	if slices.Contains(s.Adapters, name) {
		return
	}
	f.discovered[id] = s.WithAdapter(name)
	f.publish()
}

// undiscovered lists the workers to ask for their models: those that
// declare no model and whose models are not known yet, or, when models are
// refreshed, every worker.
func (f *Fleet) undiscovered() []Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refreshModels {
		return slices.Clone(f.workers)
	}
	var out []Worker
	for _, w := range f.workers {
		if _, ok := f.discovered[w.ID]; !ok && w.Model == "" {
			out = append(out, w)
		}
	}
	return out
}

// unmeasured lists workers whose KV capacity is not known yet.
func (f *Fleet) unmeasured() []Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Worker
	for _, w := range f.workers {
		if !f.measured[w.ID] {
			out = append(out, w)
		}
	}
	return out
}

func (f *Fleet) setMeasured(id affinity.WorkerID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.measured[id] = true
}

// Workers returns the registry's worker list as last set.
func (f *Fleet) Workers() []Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.workers)
}

func (f *Fleet) syncUpstreams() {
	keep := map[affinity.WorkerID]bool{}
	for _, w := range f.workers {
		u, err := workerurl.Parse(w.URL)
		if err == nil {
			err = f.hosts.AllowsURL(u)
		}
		if err != nil {
			if f.ups[w.ID] == nil {
				f.log.Warn("worker gets no traffic", "worker", w.ID, "err", err)
			}
			continue
		}
		keep[w.ID] = true
		if f.ups[w.ID] == nil {
			f.ups[w.ID] = newUpstream(u.Addr(), u.TLS(), f.dialTimeout, f.maxIdle, f.dialer)
			if f.idleTimeout > 0 {
				f.ups[w.ID].idleTimeout = f.idleTimeout
			}
		}
	}
	for id, up := range f.ups {
		if !keep[id] {
			up.close()
			delete(f.ups, id)
			delete(f.discovered, id)
			delete(f.measured, id)
			if f.onRemove != nil {
				f.onRemove(id)
			}
		}
	}
}

func (f *Fleet) publish() {
	v := &view{members: map[affinity.WorkerID]*member{}, pools: map[poolKey]*affinity.Pool{},
		anyModel: map[string]*affinity.Pool{}, serves: map[poolKey]bool{}, hasAny: map[string]bool{},
		all: map[string]*affinity.Pool{}, adapters: map[string]bool{}, lora: map[string]*affinity.Pool{}}
	eligible := map[poolKey][]*affinity.Load{}
	anyEligible := map[string][]*affinity.Load{}
	roleEligible := map[string][]*affinity.Load{}
	loraEligible := map[string][]*affinity.Load{}
	for _, w := range f.workers {
		if f.ups[w.ID] == nil {
			continue // its URL did not parse
		}
		base, _ := workerurl.Parse(w.URL)
		m := &member{Worker: w, up: f.ups[w.ID], base: base, addr: base.Addr(), models: f.modelsOf(w)}
		if f.counters != nil {
			m.counters = f.counters(w)
		}
		v.members[w.ID] = m
		v.ordered = append(v.ordered, m)
		if len(m.models) == 0 {
			v.hasAny[w.Role] = true
		}
		for _, model := range m.models {
			v.serves[poolKey{w.Role, model}] = true
		}
		adapters := f.discovered[w.ID].Adapters
		for _, a := range adapters {
			v.adapters[a] = true
		}
		if w.Draining || !f.eligible(w.ID) {
			continue
		}
		v.eligible++
		load := f.loads.Get(w.ID)
		roleEligible[w.Role] = append(roleEligible[w.Role], load)
		if len(adapters) > 0 {
			loraEligible[w.Role] = append(loraEligible[w.Role], load)
		}
		if len(m.models) == 0 {
			anyEligible[w.Role] = append(anyEligible[w.Role], load)
		}
		for _, model := range m.models {
			k := poolKey{w.Role, model}
			eligible[k] = append(eligible[k], load)
		}
	}
	for role, loads := range anyEligible {
		v.anyModel[role] = affinity.NewPool(loads)
	}
	for role, loads := range roleEligible {
		v.all[role] = affinity.NewPool(loads)
	}
	for role, loads := range loraEligible {
		v.lora[role] = affinity.NewPool(loads)
	}
	for k := range v.serves {
		v.pools[k] = affinity.NewPool(mergeByID(eligible[k], anyEligible[k.role]))
	}
	f.current.Store(v)
	if f.onPublish != nil {
		f.onPublish(v)
	}
}

// modelsOf is what worker w serves: the model of its registry entry (and
// the adapters its /v1/models lists, when models are refreshed), else what
// its /v1/models said, else nothing declared (it serves any model).
func (f *Fleet) modelsOf(w Worker) []string {
	if w.Model != "" {
		return append([]string{w.Model}, f.discovered[w.ID].Adapters...)
	}
	return f.discovered[w.ID].Names
}

// mergeByID merges two id-sorted lists into one id-sorted list.
func mergeByID(a, b []*affinity.Load) []*affinity.Load {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, func(x, y *affinity.Load) int { return int(x.ID()) - int(y.ID()) })
	return out
}

// close closes every worker's idle connections.
func (f *Fleet) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, up := range f.ups {
		up.close()
	}
}
