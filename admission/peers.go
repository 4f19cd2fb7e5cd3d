package admission

import (
	"slices"
	"time"
)

// PeerEntry is one (class, tenant) of a replica's queue report.
type PeerEntry struct {
	Class  Class
	Tenant uint64 // TenantID
	// Queued is its requests waiting; InFlight its requests admitted and
	// not done, Tokens their cost.
	Queued, InFlight uint32
	Tokens           uint64
	// Waited is how long the oldest of the queued had waited when the
	// report was made; 0 from a replica that does not say.
	Waited time.Duration
}

// MaxPeerEntries bounds one replica's report, and what is kept of each
// peer's: the entries with the most queued, then the most tokens in flight.
// At about 16 bytes an entry on the wire, a report stays within a few
// hundred bytes.
const MaxPeerEntries = 16

// MaxPeers bounds the peers whose reports are kept; a report from one more
// is dropped until another expires or leaves.
const MaxPeers = 64

type peerKey struct {
	class  Class
	tenant uint64
}

// peerView merges the peers' reports: per (class, tenant), what waits and
// what is in flight elsewhere in the tier, and since when its oldest
// request waits.
type peerView struct {
	origins  map[string]peerReport
	queued   map[peerKey]uint32
	tokens   map[peerKey]int64
	inflight map[uint64]int // per tenant, over its classes
	oldest   map[peerKey]time.Time
}

// peerReport is one peer's last report and when it arrived.
type peerReport struct {
	entries []PeerEntry
	at      time.Time
}

func newPeerView() peerView {
	return peerView{origins: map[string]peerReport{}}
}

// set replaces origin's report, arrived at now, and rebuilds the merged
// maps.
func (v *peerView) set(origin string, entries []PeerEntry, now time.Time) bool {
	if _, ok := v.origins[origin]; !ok && len(entries) > 0 && len(v.origins) >= MaxPeers {
		return false
	}
	if len(entries) == 0 {
		delete(v.origins, origin)
	} else {
		v.origins[origin] = peerReport{entries: slices.Clone(entries[:min(len(entries), MaxPeerEntries)]), at: now}
	}
	v.queued, v.tokens, v.inflight, v.oldest = map[peerKey]uint32{}, map[peerKey]int64{}, map[uint64]int{}, map[peerKey]time.Time{}
	for _, rep := range v.origins {
		for _, e := range rep.entries {
			k := peerKey{e.Class, e.Tenant}
			v.queued[k] += e.Queued
			v.tokens[k] += int64(e.Tokens)
			v.inflight[e.Tenant] += int(e.InFlight)
			if e.Queued == 0 {
				continue
			}
			if since, ok := v.oldest[k]; !ok || rep.at.Add(-e.Waited).Before(since) {
				v.oldest[k] = rep.at.Add(-e.Waited)
			}
		}
	}
	return true
}

// waitingOrigins counts the peers that report requests waiting.
func (v *peerView) waitingOrigins() int {
	n := 0
	for _, rep := range v.origins {
		if slices.ContainsFunc(rep.entries, func(e PeerEntry) bool { return e.Queued > 0 }) {
			n++
		}
	}
	return n
}

func (v *peerView) remoteTokens(c Class, id uint64) int64 { return v.tokens[peerKey{c, id}] }

func (v *peerView) remoteInFlight(id uint64, tier bool) int {
	if !tier {
		return 0
	}
	return v.inflight[id]
}

// waitingMin holds the two smallest tier-wide tokens in flight among the
// tenants of a class that have requests waiting somewhere in the tier.
type waitingMin struct {
	n          int
	id1, id2   uint64
	tok1, tok2 int64
}

func (w *waitingMin) add(id uint64, tok int64) {
	switch {
	case w.n > 0 && id == w.id1:
		return
	case w.n == 0 || tok < w.tok1:
		w.id2, w.tok2 = w.id1, w.tok1
		w.id1, w.tok1 = id, tok
	case w.n == 1 || tok < w.tok2:
		w.id2, w.tok2 = id, tok
	}
	w.n++
}

// without is the smallest among tenants other than id.
func (w waitingMin) without(id uint64) (int64, bool) {
	switch {
	case w.n == 0, w.n == 1 && w.id1 == id:
		return 0, false
	case w.id1 != id:
		return w.tok1, true
	}
	return w.tok2, true
}

// waitingMin finds, over class c's tenants waiting here or at a peer, the
// two with the least tokens in flight across the tier. Without the tier
// view it finds nothing: deficit round robin alone shares the replica's
// slots.
func (s *Scheduler) waitingMin(c Class) waitingMin {
	var w waitingMin
	if !s.cfg.TierFair {
		return w
	}
	v := &s.peers
	ring := s.bands[c].ring
	for _, t := range ring {
		w.add(t.id, t.tokens+v.tokens[peerKey{c, t.id}])
	}
	for k, q := range v.queued {
		if k.class != c || q == 0 || slices.ContainsFunc(ring, func(t *tenant) bool { return t.id == k.tenant }) {
			continue
		}
		// Waiting only at a peer; what it has in flight here counts too.
		var here int64
		if t := s.byID[k]; t != nil {
			here = t.tokens
		}
		w.add(k.tenant, v.tokens[k]+here)
	}
	return w
}

// SetPeer replaces what peer origin last reported; nil or empty forgets it
// (the peer left, went silent or has nothing waiting or in flight). At most
// MaxPeerEntries of a report and MaxPeers peers are kept; entries of a class
// this replica does not have are dropped (replicas may disagree on classes
// while a change rolls out).
func (s *Scheduler) SetPeer(origin string, entries []PeerEntry, now time.Time) {
	known := make([]PeerEntry, 0, len(entries))
	for _, e := range entries {
		if int(e.Class) < len(s.bands) {
			known = append(known, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers.set(origin, known, now)
	s.dispatch(now)
}

// Report appends this replica's queue report at now: per (class, tenant)
// with requests queued or in flight, at most MaxPeerEntries, those with the
// most queued and then the most tokens in flight first.
func (s *Scheduler) Report(dst []PeerEntry, now time.Time) []PeerEntry {
	s.mu.Lock()
	start := len(dst)
	for _, t := range s.tenants {
		e := PeerEntry{Class: t.key.class, Tenant: t.id, Queued: uint32(len(t.queue)),
			InFlight: uint32(max(t.inflight, 0)), Tokens: uint64(max(t.tokens, 0))}
		if len(t.queue) > 0 {
			e.Waited = max(now.Sub(t.queue[0].arrived), 0)
		}
		dst = append(dst, e)
	}
	s.mu.Unlock()
	mine := dst[start:]
	slices.SortFunc(mine, func(a, b PeerEntry) int {
		if a.Queued != b.Queued {
			return int(b.Queued) - int(a.Queued)
		}
		switch {
		case a.Tokens > b.Tokens:
			return -1
		case a.Tokens < b.Tokens:
			return 1
		}
		return 0
	})
	return dst[:start+min(len(mine), MaxPeerEntries)]
}
