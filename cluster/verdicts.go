package cluster

import (
	"time"

	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/loadsync"
)

// verdictRelay carries the health monitor's wedge and degrade verdicts to
// the gossip, and the peers' verdicts back to the monitor, in each one's
// terms.
type verdictRelay struct{ monitor *health.Monitor }

// local reports this replica's wedge and degrade verdicts.
func (v verdictRelay) local(dst []loadsync.Verdict) []loadsync.Verdict {
	for _, x := range v.monitor.Verdicts() {
		dst = append(dst, loadsync.Verdict{Worker: uint32(x.Worker), Kind: uint8(x.Kind), Since: x.Since.UnixNano()})
	}
	return dst
}

// remote hands a peer's verdicts about known workers (the core let only
// those through) to the monitor. nil means the peer withdrew them, left,
// died or went silent: forget them all.
func (v verdictRelay) remote(origin string, vs []loadsync.Verdict) {
	if vs == nil {
		v.monitor.ForgetOrigin(origin)
		return
	}
	out := make([]health.Verdict, 0, len(vs))
	for _, x := range vs {
		out = append(out, health.Verdict{Worker: health.WorkerID(x.Worker), Kind: health.VerdictKind(x.Kind),
			Since: time.Unix(0, x.Since)})
	}
	v.monitor.SetRemoteVerdicts(origin, out)
}
