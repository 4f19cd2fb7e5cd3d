package loadsync

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// peerView is what the peers' load reports say: their in-flight counts and
// prefill backlogs per worker, merged, and the lag of those reports. Its
// lock is its own: merging a peer's report never waits for this replica's
// report being made.
type peerView struct {
	mu       sync.Mutex
	loads    loadView
	backlogs loadView
	lags     lagWindow
	origin   string            // this replica's: its own reports echoed back are skipped
	known    func(uint32) bool // Config.KnownWorker; nil keeps every worker
	stats    *counters
}

func newPeerView(cfg *Config, stats *counters) *peerView {
	return &peerView{loads: newLoadView(cfg.LoadTTL, cfg.OnRemoteLoad), backlogs: newLoadView(cfg.LoadTTL, cfg.OnRemoteBacklog),
		lags: newLagWindow(cfg.LagSamples), origin: cfg.Origin, known: cfg.KnownWorker, stats: stats}
}

// expire drops the contribution of every origin not heard from within
// LoadTTL before now.
func (v *peerView) expire(now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loads.expire(now)
	v.backlogs.expire(now)
}

// forget drops origin's loads and backlogs at once.
func (v *peerView) forget(origin string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loads.forget(origin)
	v.backlogs.forget(origin)
}

func (v *peerView) receiveLoad(r *reader, now time.Time) error {
	rep, err := decodeLoadReport(r)
	if err != nil {
		return err
	}
	if rep.origin == v.origin {
		return nil
	}
	rep.entries = v.knownOnly(rep.entries)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loads.expire(now)
	v.accepted(v.loads.apply(&rep, now), rep.origin, now)
	return nil
}

func (v *peerView) receiveLoadDelta(r *reader, now time.Time) error {
	d, err := decodeLoadDelta(r)
	if err != nil {
		return err
	}
	if d.origin == v.origin {
		return nil
	}
	d.entries = v.knownOnly(d.entries)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loads.expire(now)
	outcome := v.loads.applyDelta(&d, now)
	if outcome == deltaInexact {
		v.stats.deltasInexact.Add(1)
	}
	v.accepted(outcome != deltaStale, d.origin, now)
	return nil
}

// receiveBacklog merges a peer's prefill backlog report, one packet of it,
// as receiveLoad merges its counts.
func (v *peerView) receiveBacklog(r *reader, now time.Time) error {
	rep, err := decodeReport(r, true)
	if err != nil || rep.origin == v.origin {
		return err
	}
	rep.entries = v.knownOnly(rep.entries)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backlogs.expire(now)
	v.backlogs.apply(&rep, now)
	return nil
}

// knownOnly keeps, in place, the entries of workers Config.KnownWorker
// knows.
func (v *peerView) knownOnly(entries []WorkerLoad) []WorkerLoad {
	if v.known == nil {
		return entries
	}
	return slices.DeleteFunc(entries, func(e WorkerLoad) bool { return !v.known(e.Worker) })
}

// accepted counts a load packet and, when it was merged, records the lag
// of origin's view: how old the newest state of the origin is that the view
// now equals. mu is held.
func (v *peerView) accepted(ok bool, origin string, now time.Time) {
	if !ok {
		v.stats.reportsStale.Add(1)
		return
	}
	v.stats.reportsAccepted.Add(1)
	if lag, exact := v.loads.lag(origin, now); exact {
		v.lags.record(lag)
	}
}

// remote returns the sum of the other live replicas' latest counts for
// worker: the part of its merged load this replica did not cause.
func (v *peerView) remote(worker uint32) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.loads.remote[worker]
}

// origins describes every live peer whose reports are held, sorted by name,
// with ages measured at now.
func (v *peerView) origins(now time.Time) []OriginStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.loads.status(now)
}

// lag summarises the recent receive-minus-send lags of load reports.
func (v *peerView) lag() LagSummary {
	v.mu.Lock()
	samples, total := v.lags.snapshot()
	v.mu.Unlock()
	return summarise(samples, total)
}

// peerLoads returns every live peer's latest in-flight count per worker
// (non-zero counts only), by origin: the parts of the merged load, for
// the status page. The maps are copies.
func (v *peerView) peerLoads() map[string]map[uint32]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]map[uint32]int64, len(v.loads.origins))
	for name, o := range v.loads.origins {
		if !o.gone {
			out[name] = maps.Clone(o.loads)
		}
	}
	return out
}

// resolve gives a packet that says epoch 0 the epoch held for its origin
// (a step applies on what the origin's full report began), and its
// sections that epoch and their send time. false: the origin is not held,
// and a step on nothing is dropped. mu is held.
func (v *peerView) resolve(p *reportPacket) bool {
	if p.epoch == 0 {
		o := v.loads.origins[p.origin]
		if o == nil {
			return false
		}
		p.epoch = o.epoch
		p.sentAt = (int64(p.epoch)/1e3 + p.sinceEpoch) * 1e3
	}
	for _, d := range []*loadDelta{p.delta, p.step, p.backlogStep} {
		if d != nil {
			d.epoch, d.sentAt = p.epoch, p.sentAt
		}
	}
	for _, reps := range [][]loadReport{p.fulls, p.backlogFulls} {
		for i := range reps {
			reps[i].epoch, reps[i].sentAt = p.epoch, p.sentAt
		}
	}
	return true
}

// mergeReportLoads merges the packet's loads and backlogs into the views.
func (v *peerView) mergeReportLoads(p *reportPacket, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loads.expire(now)
	v.backlogs.expire(now)
	if !v.resolve(p) {
		v.stats.reportsStale.Add(1)
		return
	}
	merged, any := false, false
	for i := range p.fulls {
		p.fulls[i].entries = v.knownOnly(p.fulls[i].entries)
		merged = v.loads.apply(&p.fulls[i], now) || merged
		any = true
	}
	if p.delta != nil {
		merged = v.mergeDelta(p.delta, v.loads.applyDelta, now) || merged
		any = true
	}
	if p.step != nil {
		merged = v.mergeDelta(p.step, v.loads.applyStep, now) || merged
		any = true
	}
	if any {
		v.accepted(merged, p.origin, now)
	}
	v.mergeReportBacklogs(p, now)
}

// mergeDelta merges a cumulative delta or a step of known workers with
// apply and reports whether it was news. mu is held.
func (v *peerView) mergeDelta(d *loadDelta, apply func(*loadDelta, time.Time) deltaOutcome, now time.Time) bool {
	d.entries = v.knownOnly(d.entries)
	outcome := apply(d, now)
	if outcome == deltaInexact {
		v.stats.deltasInexact.Add(1)
	}
	return outcome != deltaStale
}

// mergeReportBacklogs merges the packet's backlogs. mu is held.
func (v *peerView) mergeReportBacklogs(p *reportPacket, now time.Time) {
	for i := range p.backlogFulls {
		p.backlogFulls[i].entries = v.knownOnly(p.backlogFulls[i].entries)
		v.backlogs.apply(&p.backlogFulls[i], now)
	}
	if p.backlogStep != nil {
		p.backlogStep.entries = v.knownOnly(p.backlogStep.entries)
		v.backlogs.applyStep(p.backlogStep, now)
	}
}
