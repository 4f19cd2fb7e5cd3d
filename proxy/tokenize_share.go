package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
)

// A tier shares the prompts' tokens. A conversation's next turn reaches any
// replica behind the load balancer; the replica that tokenized the turn
// before is seldom the one asked, so without sharing most turns of a tier
// of 8 waited for an engine's /tokenize where one replica routed them at
// once on the tokens of the turn before. Each replica therefore gives the
// tokens it learns to the replica that keeps those of the prompts sent to
// the worker its prompt went to (its keeper: one replica per worker, by
// rendezvous over the live replicas), and a replica that does not know a
// turn's prefix asks the keeper of the worker the turn before went to (the
// text index says which) before it asks an engine.

// TokenShare carries a replica's token questions and gifts to the
// replicas that keep them (the cluster's, over the cluster port).
type TokenShare interface {
	// KeeperOf names the replica that keeps the tokens of the prompts sent
	// to worker w: "" when it is this one, or it has no peer.
	KeeperOf(w affinity.WorkerID) string
	// Find asks keeper for the tokens of the longest prompt it keeps that
	// query's marks name (appendTokenQuery), by deadline; an empty answer
	// is none.
	Find(keeper string, query []byte, deadline time.Time) ([]byte, error)
	// Keep gives keeper the tokens of a prompt (appendTokenEntry), by
	// deadline.
	Keep(keeper string, entry []byte, deadline time.Time) error
}

// The bounds of the sharing: how long a turn waits for its keeper before it
// asks an engine, how long a gift may take, how many gifts are in flight
// (one that finds them all taken is not given), and how many tokens one
// entry may carry.
const (
	shareFindTimeout = 5 * time.Millisecond
	shareKeepTimeout = time.Second
	maxKeeping       = 8
	maxSharedTokens  = 1 << 20
)

// errTokenWire marks a token query or entry that does not decode.
var errTokenWire = errors.New("tokens: malformed")

const tokenWireVersion = 1

// appendTokenQuery encodes a query for the prompts marks name: the
// version, the count, the marks.
func appendTokenQuery(b []byte, marks []uint64) []byte {
	b = append(b, tokenWireVersion)
	b = binary.AppendUvarint(b, uint64(len(marks)))
	for _, m := range marks {
		b = binary.LittleEndian.AppendUint64(b, m)
	}
	return b
}

func parseTokenQuery(b []byte) ([]uint64, error) {
	if len(b) == 0 || b[0] != tokenWireVersion {
		return nil, fmt.Errorf("%w: not a version %d query", errTokenWire, tokenWireVersion)
	}
	n, k := minimalUvarint(b[1:])
	rest := b[1+max(k, 0):]
	if k <= 0 || n != uint64(len(rest)/8) || len(rest)%8 != 0 {
		return nil, fmt.Errorf("%w: a query of %d bytes does not hold its marks", errTokenWire, len(b))
	}
	marks := make([]uint64, n)
	for i := range marks {
		marks[i] = binary.LittleEndian.Uint64(rest[8*i:])
	}
	return marks, nil
}

// appendTokenEntry encodes e: the version, its prompt's name and last
// mark, its completion prompt's length, the routing text it stands for,
// and its tokens.
func appendTokenEntry(b []byte, e *tokenEntry) []byte {
	b = append(b, tokenWireVersion)
	b = binary.LittleEndian.AppendUint64(b, e.full)
	b = binary.LittleEndian.AppendUint64(b, e.mark)
	b = binary.AppendUvarint(b, uint64(e.size))
	b = binary.AppendUvarint(b, uint64(e.text))
	b = binary.AppendUvarint(b, uint64(len(e.tokens)))
	for _, t := range e.tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return b
}

// parseTokenEntry decodes an entry, its sizes bounded before anything is
// allocated: at most maxSharedTokens tokens, and no more than the text they
// stand for could make (templateTokens beyond one a byte).
func parseTokenEntry(b []byte) (*tokenEntry, error) {
	if len(b) < 17 || b[0] != tokenWireVersion {
		return nil, fmt.Errorf("%w: not a version %d entry", errTokenWire, tokenWireVersion)
	}
	e := &tokenEntry{full: binary.LittleEndian.Uint64(b[1:]), mark: binary.LittleEndian.Uint64(b[9:])}
	rest := b[17:]
	var fields [3]uint64
	for i := range fields {
		v, k := minimalUvarint(rest)
		if k <= 0 || v > maxSharedTokens*16 {
			return nil, fmt.Errorf("%w: a length out of bounds", errTokenWire)
		}
		fields[i], rest = v, rest[k:]
	}
	size, text, n := int(fields[0]), int(fields[1]), fields[2]
	if n > maxSharedTokens || n > uint64(text+templateTokens) || uint64(len(rest)) != 4*n {
		return nil, fmt.Errorf("%w: %d tokens for %d bytes of text in %d bytes", errTokenWire, n, text, len(rest))
	}
	e.size, e.text = size, text
	e.tokens = make([]uint32, n)
	for i := range e.tokens {
		e.tokens[i] = binary.LittleEndian.Uint32(rest[4*i:])
	}
	return e, nil
}

// minimalUvarint is binary.Uvarint that refuses (k 0) a number written in
// more bytes than it needs: a peer's bytes decode one way only.
func minimalUvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	var buf [binary.MaxVarintLen64]byte
	if k > 0 && k != binary.PutUvarint(buf[:], v) {
		return 0, 0
	}
	return v, k
}

// extends says whether p starts with e's prompt and is longer: a chat's by
// its messages' marks (e names a chat by the mark of its last message), a
// completion's by the hash of p's prompt up to e's length.
func (p prompt) extends(e *tokenEntry) bool {
	if e.full == p.full {
		return false
	}
	if p.text == nil {
		return e.full == e.mark && slices.Contains(p.marks, e.mark)
	}
	return e.size < len(p.text) && xxh3.HashSeed(p.text[:e.size], p.marks[0]) == e.full
}

// fromKeeper asks the keeper of the worker the turn before req's went to
// for the tokens of that turn (or a longer earlier one), for a prompt this
// replica knows no prefix of; nil when req continues no earlier turn, this
// replica is that keeper, or the keeper has none in time (shareFindTimeout,
// and no later than deadline, the request's bound on tokenization).
func (t *tokenizer) fromKeeper(req *affinity.Request, pool *affinity.Pool, p prompt, deadline time.Time) *tokenEntry {
	if t.share == nil || t.index == nil {
		return nil
	}
	w, ok := t.index.Continues(req.Hashes, pool)
	if !ok {
		return nil
	}
	keeper := t.share.KeeperOf(w)
	if keeper == "" {
		return nil
	}
	if by := time.Now().Add(shareFindTimeout); by.Before(deadline) {
		deadline = by
	}
	ans, err := t.share.Find(keeper, appendTokenQuery(nil, p.marks), deadline)
	if err != nil {
		t.shared.findFailed.Inc()
		return nil
	}
	if len(ans) == 0 {
		t.shared.findNone.Inc()
		return nil
	}
	e, err := parseTokenEntry(ans)
	if err != nil || !p.extends(e) {
		t.shared.findFailed.Inc()
		return nil
	}
	t.shared.found.Inc()
	t.cache.putEntry(e) // the next turn through this replica finds it here
	return e
}

// sharedPrompt is a prompt whose tokens go to its keeper once both are
// known: the tokens (learned, maybe in the background) and the worker the
// request went to (when its answer began).
type sharedPrompt struct {
	mu     sync.Mutex
	entry  *tokenEntry // its tokens nil until learned
	worker affinity.WorkerID
	routed bool
	given  bool
}

// newShared is x's prompt p to share, standing for text bytes of routing
// text; nil when this replica shares nothing, or x is disaggregated (its
// prompt's tokens go with the prefill, its answer comes from the decode
// worker).
func (t *tokenizer) newShared(x *exchange, p prompt, text int) *sharedPrompt {
	if t.share == nil || x.pd {
		return nil
	}
	sh := &sharedPrompt{entry: &tokenEntry{mark: p.marks[len(p.marks)-1], full: p.full, size: len(p.text), text: text}}
	x.shared = sh
	return sh
}

// learned gives sh its tokens; routed its worker. The second of the two
// gives the entry to the keeper.
func (t *tokenizer) learned(sh *sharedPrompt, tokens []uint32) {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	sh.entry.tokens = tokens
	t.giveLocked(sh)
	sh.mu.Unlock()
}

func (t *tokenizer) routed(sh *sharedPrompt, w affinity.WorkerID) {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	if !sh.routed {
		sh.worker, sh.routed = w, true
		t.giveLocked(sh)
	}
	sh.mu.Unlock()
}

// giveLocked sends sh's entry to its worker's keeper once its tokens and
// its worker are known, in the background, unless maxKeeping gifts are in
// flight. This replica keeps its own already (the cache).
func (t *tokenizer) giveLocked(sh *sharedPrompt) {
	if sh.given || !sh.routed || sh.entry.tokens == nil {
		return
	}
	sh.given = true
	keeper := t.share.KeeperOf(sh.worker)
	if keeper == "" {
		return
	}
	select {
	case t.keeping <- struct{}{}:
	default:
		t.shared.keepDropped.Inc()
		return
	}
	entry := appendTokenEntry(nil, sh.entry)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() { <-t.keeping }()
		if err := t.share.Keep(keeper, entry, time.Now().Add(shareKeepTimeout)); err != nil {
			t.shared.keepFailed.Inc()
			return
		}
		t.shared.kept.Inc()
	}()
}

// streamStarted and heard learn the worker a shared prompt went to.
func (t *tokenizer) streamStarted(x *exchange, a *attempt) { t.routed(x.shared, a.m.ID) }

func (t *tokenizer) heard(x *exchange, w affinity.WorkerID, status int, _ []byte) {
	if status/100 == 2 {
		t.routed(x.shared, w)
	}
}

// findForPeer answers a peer's TokenShare.Find (see Proxy.FindTokens); t
// is nil when the replica routes on no engine's events.
func (t *tokenizer) findForPeer(query []byte) ([]byte, error) {
	marks, err := parseTokenQuery(query)
	if err != nil || t == nil {
		return nil, err
	}
	e := t.cache.lookupMarks(marks)
	if e == nil {
		return nil, nil
	}
	return appendTokenEntry(nil, e), nil
}

// keepForPeer keeps a peer's TokenShare.Keep (see Proxy.KeepTokens); t is
// nil when the replica routes on no engine's events.
func (t *tokenizer) keepForPeer(entry []byte) error {
	e, err := parseTokenEntry(entry)
	if err != nil || t == nil {
		return err
	}
	t.cache.putEntry(e)
	t.shared.keptForPeers.Inc()
	return nil
}

// shareCounts count the sharing: vllm_router_kv_token_share_total{op,result}.
type shareCounts struct {
	found, findNone, findFailed   *metrics.Counter // asked a keeper
	kept, keepFailed, keepDropped *metrics.Counter // gave one
	keptForPeers                  *metrics.Counter // kept a peer's
}

func newShareCounts(set *metrics.Set) shareCounts {
	c := func(op, result string) *metrics.Counter {
		return set.NewCounter(fmt.Sprintf(`vllm_router_kv_token_share_total{op=%q,result=%q}`, op, result))
	}
	return shareCounts{found: c("find", "found"), findNone: c("find", "none"), findFailed: c("find", "failed"),
		kept: c("give", "kept"), keepFailed: c("give", "failed"), keepDropped: c("give", "dropped"),
		keptForPeers: c("keep", "kept")}
}
