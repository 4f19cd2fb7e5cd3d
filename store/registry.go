package store

// Registry is an immutable snapshot of the replicated state: the workers, the
// routing config and the Raft index it reflects. The FSM publishes a new one
// after every command; holders keep a consistent view for as long as they
// hold the pointer. Safe for concurrent use; nothing in it may be modified,
// including the slices and maps its methods return.
type Registry struct {
	workers []Worker // sorted by ID
	byID    map[WorkerID]int
	byURL   map[string]int
	routing *RoutingConfig
	// routingIndex is the log index at which routing was last set (0:
	// never), the version a compare-and-set names.
	routingIndex uint64
	// seeded is set once a Seed command was applied: the command-line
	// workers are registered once per registry, not at every start.
	seeded bool
	// awaitingWorkerSeed: the Seeds applied so far carried no workers (a
	// tier's replicas started without --worker-urls beside the one that
	// has them), so the first Seed that carries some still registers them.
	awaitingWorkerSeed bool
	index              uint64
	nextID             WorkerID
}

// firstWorkerID is the id the first worker of a cluster gets.
const firstWorkerID WorkerID = 1

// emptyRegistry is the state before the first command.
func emptyRegistry() *Registry {
	return newRegistry(nil, nil, 0, firstWorkerID)
}

// newRegistry indexes workers, which must be sorted by ID and owned by the
// new registry from now on.
func newRegistry(workers []Worker, routing *RoutingConfig, index uint64, nextID WorkerID) *Registry {
	r := &Registry{
		workers: workers,
		byID:    make(map[WorkerID]int, len(workers)),
		byURL:   make(map[string]int, len(workers)),
		routing: routing,
		index:   index,
		nextID:  nextID,
	}
	for i, w := range workers {
		r.byID[w.ID] = i
		r.byURL[w.URL] = i
	}
	return r
}

// Workers returns all workers sorted by ID. The slice is shared: read only.
func (r *Registry) Workers() []Worker { return r.workers }

// Len is the number of workers.
func (r *Registry) Len() int { return len(r.workers) }

// Worker returns the worker with the given id.
func (r *Registry) Worker(id WorkerID) (Worker, bool) {
	i, ok := r.byID[id]
	if !ok {
		return Worker{}, false
	}
	return r.workers[i], true
}

// WorkerByURL returns the worker registered under url, which may be given in
// any spelling that normalises to the registered one.
func (r *Registry) WorkerByURL(url string) (Worker, bool) {
	i, ok := r.byURL[url]
	if !ok {
		n, err := NormalizeURL(url)
		if err != nil {
			return Worker{}, false
		}
		if i, ok = r.byURL[n]; !ok {
			return Worker{}, false
		}
	}
	return r.workers[i], true
}

// RoutingConfig returns the cluster-wide routing config, nil until a
// SetRoutingConfig command has been applied. The value is shared: read only.
func (r *Registry) RoutingConfig() *RoutingConfig { return r.routing }

// Index is the Raft log index of the last command applied (0 for an empty
// registry). Refused commands advance it too, so a writer that knows its
// command's index can wait until a replica's registry reaches it.
func (r *Registry) Index() uint64 { return r.index }

// NextID is the id the next added worker will get.
func (r *Registry) NextID() WorkerID { return r.nextID }

// atIndex returns r as of a later log index, sharing everything else.
func (r *Registry) atIndex(index uint64) *Registry {
	c := *r
	c.index = index
	return &c
}

// RoutingIndex is the Raft index at which the routing config was last set,
// 0 when it never was: the version a compare-and-set of the routing config
// names (SetRoutingConfig.ExpectIndex).
func (r *Registry) RoutingIndex() uint64 { return r.routingIndex }

// Seeded reports whether the command-line seeds were applied to this
// registry already (a Seed command was applied): later seeds change nothing.
func (r *Registry) Seeded() bool { return r.seeded }

// withWorkers returns a registry holding workers (sorted, now owned by the
// result) in place of r's.
func (r *Registry) withWorkers(workers []Worker, nextID WorkerID) *Registry {
	n := newRegistry(workers, r.routing, r.index, nextID)
	n.routingIndex, n.seeded, n.awaitingWorkerSeed = r.routingIndex, r.seeded, r.awaitingWorkerSeed
	return n
}

// withRouting returns r with a new routing config, set at log index index.
func (r *Registry) withRouting(c RoutingConfig, index uint64) *Registry {
	n := *r
	n.routing, n.routingIndex = &c, index
	return &n
}

// withSeeded returns r marked as seeded, still awaiting the command line's
// workers when the seed carried none.
func (r *Registry) withSeeded(awaitingWorkers bool) *Registry {
	n := *r
	n.seeded, n.awaitingWorkerSeed = true, awaitingWorkers
	return &n
}
