package affinity

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
)

// Request is what selection needs to know about one request.
type Request struct {
	// Hashes are the chained hashes of the routing text's full blocks (the
	// prompt, or the rendered messages), then of its partial last block
	// when it has one (see RequestHashes).
	Hashes []uint64
	// Full is how many of Hashes are full blocks: a chain from depth 0.
	Full int
	// Tail keys a request whose full blocks are all known (see TailKey).
	Tail uint64
	// SessionKey is the consistent_hash key: X-Session-ID, else the body's
	// user or session_id, else the whole body, hashed.
	SessionKey uint64
	// Tokens are the prompt's token IDs as the engine computes them, when
	// the router asked for them (KV-event routing); nil otherwise.
	Tokens []uint32
	// CacheIdentity is what the engine caches the prompt's blocks under
	// besides its tokens (the LoRA adapter it runs with, "" for the base
	// model, and the request's cache_salt; kvevents.Identity composes
	// them): blocks of two identities never match each other.
	CacheIdentity string
	// Adapter is the LoRA adapter the request names, 0 for a base model:
	// a router with a residency table sends it where the adapter is
	// resident (adapter_place.go).
	Adapter AdapterKey
	// TokenText is how many leading bytes of Text the Tokens stand for
	// when they are a prefix's (a conversation's earlier prompt, whose
	// tokens were known before this one's); 0: all of Text.
	TokenText int
	// Matcher, when set, finds the prefix the candidates hold instead of
	// the index (see PrefixMatcher).
	Matcher PrefixMatcher
	// TextLen is the routing text's length in bytes (a peer's request that
	// the placer decides on its hashes alone carries it too).
	TextLen int
	// Placer says the request is decided by the tier's placer, which makes
	// every cold decision of the tier: it selects on the loads as they are,
	// without the peers' expected share of a burst, since it sees the
	// burst's cold requests itself.
	Placer bool
	// Home is where the index last saw the request's prefix, set by a
	// Matcher whose engines' events say every candidate has since evicted
	// it (0: none): its miss goes back there unless that worker is busy, so
	// that a conversation whose cache was evicted keeps the place the tier
	// gave it rather than joining whichever worker looks least loaded.
	Home WorkerID
	// burst is the peer share at selection, and reserved the worker
	// reserved; both set by the Router.
	burst    burstView
	reserved *Load
}

// Len is the routing text's length in bytes.
func (r *Request) Len() int { return r.TextLen }

// Choice is a policy's pick. Seen is the chosen worker's local in-flight
// count when it was read, so that the reservation can detect a concurrent
// request that changed it; -1 means the choice did not depend on load.
type Choice struct {
	Load    *Load
	Seen    int64
	Hit     bool
	Matched int  // bytes of the routing text matched in the index
	Shed    bool // a hit whose owner was overloaded: affinity paid for balance
	// prefix is the deepest matched block of a request whose prefix the
	// index knew (prefixKnown), the key of its heat.
	prefix      uint64
	prefixKnown bool
}

// Policy picks a worker from a non-empty pool. Select must not change any
// counter: the router reserves the pick afterwards.
type Policy interface {
	Name() string
	Select(req *Request, pool *Pool) Choice
}

// prefixAware policies place requests by the prefixes they record: they
// want the chosen worker recorded as the owner of the request's blocks, and
// only their decisions predict a cache hit or miss.
type prefixAware interface{ recordsOwnership() }

// sessionKeyed policies place a request by its SessionKey.
type sessionKeyed interface{ hashesSession() }

// RoutesByPrefix reports whether p places requests by the prefixes it
// records, so that each of its decisions is a cache hit or a miss. Callers
// ask this, never the policy's name.
func RoutesByPrefix(p Policy) bool {
	_, ok := p.(prefixAware)
	return ok
}

// UsesSessionKey reports whether p places requests by Request.SessionKey:
// callers derive the key (hashing a header, or a whole body) for such a
// policy only.
func UsesSessionKey(p Policy) bool {
	_, ok := p.(sessionKeyed)
	return ok
}

// routedObserver policies hear every reserved choice, once per request
// (Select may run more than once before a reservation succeeds).
type routedObserver interface{ routed(Choice) }

// Policy names accepted by --policy.
const (
	PolicyRoundRobin     = "round_robin"
	PolicyRandom         = "random"
	PolicyPowerOfTwo     = "power_of_two"
	PolicyLeastLoad      = "least_load"
	PolicyConsistentHash = "consistent_hash"
	PolicyCacheAware     = "cache_aware"
	PolicyFleetGate      = "cache_aware_fleet_gate"
)

// PolicyNames lists every policy, for flag help and validation.
var PolicyNames = []string{PolicyCacheAware, PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo,
	PolicyLeastLoad, PolicyConsistentHash, PolicyFleetGate}

// Miss placements accepted by --miss-placement.
const (
	PlaceLeastLoad    = "least_load"
	PlaceLeastPrefill = "least_prefill"
	PlaceRendezvous   = "rendezvous"
)

// PlacementNames lists every miss placement, for flag help and validation.
var PlacementNames = []string{PlaceLeastPrefill, PlaceLeastLoad, PlaceRendezvous}

// Settings configure a policy.
type Settings struct {
	Policy        string
	Thresholds    Thresholds
	MissPlacement string
	BlockSize     int
	// Rand returns random bits; nil uses math/rand/v2. The simulator passes
	// a seeded source.
	Rand func() uint64
	// OverloadOnReports makes the overload check of a cache-aware hit
	// compare the loads as counted and reported, without the peers'
	// expected share of this replica's recent reservations (which still
	// orders the owners and places misses). Off in the product; the
	// simulator compares with it (fleetsim --share-in-overload=false).
	OverloadOnReports bool
}

// NewPolicy builds the named policy. The index is needed by the cache-aware
// policies only.
func NewPolicy(s Settings, ix *Index) (Policy, error) {
	rnd := s.Rand
	if rnd == nil {
		rnd = rand.Uint64
	}
	if !slices.Contains(PlacementNames, s.MissPlacement) {
		return nil, fmt.Errorf("unknown miss placement %q (one of %v)", s.MissPlacement, PlacementNames)
	}
	switch s.Policy {
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyRandom:
		return &Random{rand: rnd}, nil
	case PolicyPowerOfTwo:
		return &PowerOfTwo{rand: rnd}, nil
	case PolicyLeastLoad:
		return LeastLoad{}, nil
	case PolicyConsistentHash:
		return ConsistentHash{}, nil
	case PolicyCacheAware, PolicyFleetGate:
		if s.BlockSize <= 0 {
			return nil, fmt.Errorf("block size %d: must be positive", s.BlockSize)
		}
		return &CacheAware{index: ix, thresholds: s.Thresholds, blockSize: s.BlockSize,
			rendezvous: s.MissPlacement == PlaceRendezvous, byBacklog: s.MissPlacement == PlaceLeastPrefill,
			fleetGate:         s.Policy == PolicyFleetGate,
			overloadOnReports: s.OverloadOnReports}, nil
	}
	return nil, fmt.Errorf("unknown policy %q", s.Policy)
}

// RoundRobin cycles through the pool.
type RoundRobin struct{ next atomic.Uint64 }

var _ Policy = (*RoundRobin)(nil)

func (*RoundRobin) Name() string { return PolicyRoundRobin }

func (p *RoundRobin) Select(_ *Request, pool *Pool) Choice {
	i := (p.next.Add(1) - 1) % uint64(pool.Len())
	return Choice{Load: pool.At(int(i)), Seen: -1}
}

// Random picks uniformly.
type Random struct{ rand func() uint64 }

var _ Policy = (*Random)(nil)

func (*Random) Name() string { return PolicyRandom }

func (p *Random) Select(_ *Request, pool *Pool) Choice {
	return Choice{Load: pool.At(int(p.rand() % uint64(pool.Len()))), Seen: -1}
}

// PowerOfTwo samples two distinct candidates and takes the less loaded.
type PowerOfTwo struct{ rand func() uint64 }

var _ Policy = (*PowerOfTwo)(nil)

func (*PowerOfTwo) Name() string { return PolicyPowerOfTwo }

func (p *PowerOfTwo) Select(req *Request, pool *Pool) Choice {
	n := uint64(pool.Len())
	i := p.rand() % n
	if n == 1 {
		return choose(pool, 0)
	}
	j := (i + 1 + p.rand()%(n-1)) % n
	a, b := pool.At(int(i)), pool.At(int(j))
	seenA, seenB := a.Local(), b.Local()
	if less(b.selectLoad(seenB, req.burst), b, a.selectLoad(seenA, req.burst), a, req.Tail) {
		return Choice{Load: b, Seen: seenB}
	}
	return Choice{Load: a, Seen: seenA}
}

// LeastLoad takes the smallest merged load, then the least processed, then
// the request's rendezvous order (see less).
type LeastLoad struct{}

var _ Policy = LeastLoad{}

func (LeastLoad) Name() string { return PolicyLeastLoad }

func (LeastLoad) Select(req *Request, pool *Pool) Choice {
	return pool.spread(req.burst, req.Tail).pick(pool)
}

// ConsistentHash sends a session to the same worker while the pool holds
// still, and moves only 1/n of the sessions when it changes (rendezvous
// hashing on the session key).
type ConsistentHash struct{}

var _ Policy = ConsistentHash{}

func (ConsistentHash) Name() string { return PolicyConsistentHash }

func (ConsistentHash) hashesSession() {}

func (ConsistentHash) Select(req *Request, pool *Pool) Choice {
	best, bestScore := 0, uint64(0)
	for i := range pool.Len() {
		if s := rendezvousScore(req.SessionKey, pool.At(i).id); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return Choice{Load: pool.At(best), Seen: -1}
}

// choose picks pool member i where the choice did not compare its load.
func choose(pool *Pool, i int) Choice {
	return Choice{Load: pool.At(i), Seen: -1}
}
