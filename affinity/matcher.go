package affinity

import "time"

// PrefixMatcher finds how deep a request's prefix is held by its candidates
// when something knows better than the index alone (the engines' own KV
// events). The cache-aware policy asks it instead of Index.Match; the
// overload check, the tie-break and the placement of misses stay the
// policy's.
type PrefixMatcher interface {
	// MatchPrefix returns the depth, in blocks of req.Hashes, of the deepest
	// prefix some candidate of pool holds (-1 when none holds any), and the
	// candidates that hold it that deep, appended to dst. It is called on the
	// request path, possibly more than once per request.
	MatchPrefix(req *Request, pool *Pool, dst []WorkerID) (int, []WorkerID)
}

// match is the deepest prefix of req the candidates hold: by req.Matcher
// when set, else by the index.
func (p *CacheAware) match(req *Request, pool *Pool, dst []WorkerID) (int, []WorkerID) {
	if req.Matcher != nil {
		return req.Matcher.MatchPrefix(req, pool, dst)
	}
	return p.index.Match(req.Hashes, pool, dst)
}

// Depths writes, for every member i of pool, the deepest block of hashes
// the index records it for into all[i], and the deepest whose fact was
// recorded or refreshed at or after since into recent[i]; -1 where none.
// all and recent must have pool.Len() entries. Recent facts are a worker's
// in-flight reservations: decisions (this replica's, or its peers' through
// the gossip) whose blocks its engine may not have stored yet.
func (ix *Index) Depths(hashes []uint64, pool *Pool, since time.Time, all, recent []int) {
	for i := range all {
		all[i], recent[i] = -1, -1
	}
	cutoff := since.UnixNano()
	for d := len(hashes) - 1; d >= 0; d-- {
		s := ix.shard(hashes[d])
		s.mu.RLock()
		for _, n := range s.m[hashes[d]] {
			i := pool.position(n.worker)
			if i < 0 {
				continue
			}
			all[i] = max(all[i], d)
			if n.stamp >= cutoff {
				recent[i] = max(recent[i], d)
			}
		}
		s.mu.RUnlock()
	}
}
