package health

// Other replicas' verdicts are heard by gossip, from the outside: one replica
// alone (a stalled one, a buggy one, a stranger) must not be able to take a
// worker away from the whole tier. A remote verdict takes a worker out here
// only when a quorum of the live replicas holds one against it, or when this
// replica's own evidence agrees: its own attempts on the worker have been
// silent for half of WedgeTimeout (for a wedge verdict), or its own rate
// samples, too few for a verdict of its own, put the worker below its peers
// (for a degrade verdict).

// quorum is the number of replicas, out of live, whose verdicts take a worker
// out: more than half, or all of them when there are fewer than three. live
// counts this replica, and is never fewer than the origins holding verdicts
// and this replica (applyRemoteLocked), so a verdict heard before the
// gossip's count caught up is not a quorum alone.
func quorum(live int) int {
	if live < 3 {
		return max(live, 1)
	}
	return live/2 + 1
}

func (j *judge) setLiveReplicas(n int) {
	n = max(n, 1)
	if int(j.live.Swap(int32(n))) == n {
		return
	}
	j.controlMu.Lock()
	defer j.controlMu.Unlock()
	j.applyRemoteLocked()
}

// liveReplicas is the number last given to SetLiveReplicas, or 1.
func (j *judge) liveReplicas() int { return int(j.live.Load()) }

// refreshRemote decides whether the remote verdicts against w take it out
// here. Caller holds mu.
func (w *worker) refreshRemote(live int) change {
	reporters := int(w.remote.Load())
	out := reporters > 0 && (reporters >= quorum(live) ||
		w.remoteWedged > 0 && w.suspectWedged ||
		w.remoteDegraded > 0 && w.suspectSlow)
	if w.remoteOut.Swap(out) != out {
		return changeRemote
	}
	return 0
}
