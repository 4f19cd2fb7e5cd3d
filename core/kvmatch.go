package core

import (
	"k8s.io/utils/clock"

	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
)

// KVSource is what the core asks of the engines' KV events: kvevents.Hub in
// the product. Its methods are called on the request path.
type KVSource interface {
	// BlockSize is the engines' block size in tokens.
	BlockSize() int
	// Keys appends the keys of a prompt's full blocks of tokens, for the
	// prompt's cache identity (an adapter's name, "" for the base model).
	Keys(dst []kvevents.Key, identity string, tokens []uint32) []kvevents.Key
	// Matched is how many leading blocks of keys worker w's engine holds
	// now, and whether its stream may be routed on.
	Matched(w uint32, keys []kvevents.Key) (int, kvevents.Trust)
	// EvictedSince reports whether w's engine removed any of keys, or its
	// set was emptied, at or after t: a reservation made at t no longer
	// stands for blocks the engine has yet to store.
	EvictedSince(w uint32, keys []kvevents.Key, t time.Time) bool
	// Expect says w was given work that should store blocks.
	Expect(w uint32)
}

// DefaultReservation is Config.KVReservation's default.
const DefaultReservation = 2 * time.Second

// KVRouting counts how the decisions of requests with tokens matched their
// candidates. Cumulative.
type KVRouting struct {
	// Requests is the decisions made with the prompt's tokens.
	Requests uint64
	// OnEvents is the candidates matched on their engine's events (and
	// their in-flight reservations); OnText the candidates whose stream was
	// not trusted, matched on the text index.
	OnEvents, OnText uint64
	// Reserved is the candidates whose match came from an in-flight
	// reservation deeper than what their engine's events showed.
	Reserved uint64
}

type kvCounts struct{ requests, onEvents, onText, reserved atomic.Uint64 }

// events matches requests that carry their tokens on the engines' KV
// events (Config.KV), with the index's in-flight reservations, and counts
// how.
type events struct {
	src         KVSource // nil: the text index alone
	reservation time.Duration
	index       *affinity.Index
	clock       clock.PassiveClock
	blockSize   int // of the routing text
	counts      kvCounts
}

func newEvents(cfg Config, index *affinity.Index) *events {
	e := &events{src: cfg.KV, reservation: cfg.KVReservation, index: index, clock: cfg.Clock, blockSize: cfg.BlockSize}
	if e.reservation <= 0 {
		e.reservation = DefaultReservation
	}
	return e
}

// KVRouting reads how the decisions with tokens matched. Safe at any time.
func (r *Replica) KVRouting() KVRouting { return r.events.routing() }

// routing reads the counts.
func (e *events) routing() KVRouting {
	c := &e.counts
	return KVRouting{Requests: c.requests.Load(), OnEvents: c.onEvents.Load(), OnText: c.onText.Load(),
		Reserved: c.reserved.Load()}
}

// kvMatch matches one request with tokens on the engines' sets: per
// candidate, the longest run of the prompt's blocks its engine holds now, or
// the deepest block an in-flight reservation (a fact recorded within
// Config.KVReservation, this replica's or a peer's) covers, whichever is
// deeper, unless the engine evicted some of the prompt's blocks within the
// reservation window (then the reservation was stored and is gone, not
// waiting); a candidate whose stream is not trusted is matched on the text
// index alone. The match is expressed in blocks of the routing text, so the
// cache threshold and the overload check judge it as they judge the index's.
type kvMatch struct {
	e    *events
	keys []kvevents.Key
	// tokens is how many tokens the keys were made of, tokenText how many
	// leading bytes of the routing text they stand for (0: all of it).
	tokens, tokenText int
}

var _ affinity.PrefixMatcher = (*kvMatch)(nil)

// use gives req a matcher on the engines' events when the replica has
// them and the request carries its tokens.
func (e *events) use(req *affinity.Request) {
	if e.src == nil || len(req.Tokens) == 0 || req.Matcher != nil {
		return
	}
	req.Matcher = &kvMatch{e: e, keys: e.src.Keys(nil, req.CacheIdentity, req.Tokens), tokens: len(req.Tokens),
		tokenText: req.TokenText}
	e.counts.requests.Add(1)
}

// given gives req, a peer's question to the placer, a matcher on the keys
// the peer made of its tokens (Question.KV), so that the placer decides it
// on the engines' events as the peer would have: the placer's index does
// not see the engines evict, and a prefix it still knows would be a hit
// on an engine that no longer holds it.
func (e *events) given(req *affinity.Request, keys []kvevents.Key, tokens, tokenText int) {
	if e.src == nil || len(keys) == 0 || tokens == 0 {
		return
	}
	req.Matcher = &kvMatch{e: e, keys: keys, tokens: tokens, tokenText: tokenText}
	e.counts.requests.Add(1)
}

// routedOn tells the events' source that d's worker was given work its
// engine should store blocks for (it holds less of the prompt than its
// tokens). It gives the request's match, if it was made on the events, and
// whether the engine's stored blocks cover d's match (no deeper in-flight
// reservation made it).
func (e *events) routedOn(req *affinity.Request, d affinity.Decision) (*kvMatch, bool) {
	m, ok := req.Matcher.(*kvMatch)
	if !ok {
		return nil, false
	}
	n, t := e.src.Matched(uint32(d.Worker), m.keys)
	if t != kvevents.Trusted {
		return m, false
	}
	if n < len(m.keys) {
		e.src.Expect(uint32(d.Worker))
	}
	return m, d.Matched > 0 && m.textDepth(req, n) >= d.Matched/e.blockSize-1
}

// note gives out, req's decision, the request's keys if it was matched
// on the events, to judge the engine's answer by, and FactEngine where the
// engine's stored blocks cover its match (routedOn).
func (e *events) note(out *Decided, req *affinity.Request) {
	if m, onEngine := e.routedOn(req, out.Decision); m != nil {
		out.kvKeys, out.at = m.keys, e.clock.Now()
		if onEngine {
			out.Fact = FactEngine
		}
	}
}

// routesOn gives req its matcher on the events (use) and reports whether
// it is routed on them: the replica has events and the request its tokens.
func (e *events) routesOn(req *affinity.Request) bool {
	e.use(req)
	_, ok := req.Matcher.(*kvMatch)
	return ok
}

// engineHeld is the most any candidate's engine holds of req's prompt by
// its trusted events, as a text depth (in blocks of the routing text, -1
// for none) less one engine block (the tokens' share of the text is an
// estimate). req is one routesOn said yes to. Nothing is counted: the
// request is matched again when it is decided.
func (e *events) engineHeld(req *affinity.Request, pool *affinity.Pool) int {
	m := req.Matcher.(*kvMatch)
	most := 0
	for i := range pool.Len() {
		if n, t := e.src.Matched(uint32(pool.At(i).ID()), m.keys); t == kvevents.Trusted {
			most = max(most, n)
		}
	}
	return m.textDepth(req, most-1)
}

func (m *kvMatch) MatchPrefix(req *affinity.Request, pool *affinity.Pool, dst []affinity.WorkerID) (int, []affinity.WorkerID) {
	n := pool.Len()
	var buf [2 * 32]int
	depths := buf[:0]
	if 2*n > len(buf) {
		depths = make([]int, 0, 2*n)
	}
	depths = depths[:2*n]
	all, recent := depths[:n], depths[n:]
	e := m.e
	since := e.clock.Now().Add(-e.reservation)
	e.index.Depths(req.Hashes, pool, since, all, recent)
	best, home, homeDepth := -1, affinity.WorkerID(0), -1
	for i := range n {
		blocks, trust := e.src.Matched(uint32(pool.At(i).ID()), m.keys)
		if trust == kvevents.Trusted {
			e.counts.onEvents.Add(1)
			if all[i] > homeDepth {
				home, homeDepth = pool.At(i).ID(), all[i]
			}
			engine := m.textDepth(req, blocks)
			if recent[i] > engine && e.src.EvictedSince(uint32(pool.At(i).ID()), m.keys, since) {
				recent[i] = -1 // the engine evicted the prompt's blocks since: the reservation is spent
			}
			if recent[i] > engine {
				e.counts.reserved.Add(1)
			}
			all[i] = max(engine, recent[i])
		} else {
			e.counts.onText.Add(1)
		}
		best = max(best, all[i])
	}
	req.Home = 0
	if best < 0 {
		req.Home = home // the index knew the prefix there; the engine evicted it since
		return -1, dst
	}
	for i, d := range all {
		if d == best {
			dst = append(dst, pool.At(i).ID())
		}
	}
	return best, dst
}

// textDepth is the depth in blocks of the routing text of a match of blocks
// KV blocks: the same share of the text the tokens cover as of the tokens,
// rounded down so that a match never claims more than the engine holds.
func (m *kvMatch) textDepth(req *affinity.Request, blocks int) int {
	if blocks <= 0 || m.tokens == 0 {
		return -1
	}
	text := req.Len()
	if m.tokenText > 0 {
		text = min(m.tokenText, text) // the tokens are a prefix's: they cover that much of the text
	}
	tokens := min(blocks*m.e.src.BlockSize(), m.tokens)
	bytes := tokens * text / m.tokens
	return min(bytes/m.e.blockSize, len(req.Hashes)) - 1
}
