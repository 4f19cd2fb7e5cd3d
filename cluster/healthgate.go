package cluster

import (
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/proxy"
)

// healthGate lets the proxy ask the health monitor about workers and report
// attempts to it, in the proxy's own terms.
type healthGate struct{ m *health.Monitor }

var _ proxy.Health = healthGate{}

func (g healthGate) Eligible(id affinity.WorkerID) bool { return g.m.Eligible(health.WorkerID(id)) }

var _ proxy.CutOffReporter = healthGate{}

// CutOff reports whether this replica hears no peer and no worker: it is the
// one cut off, and its readiness says so.
func (g healthGate) CutOff() bool { return g.m.CutOff() }

func (g healthGate) Begin(id affinity.WorkerID) (proxy.Attempt, error) {
	a, err := g.m.Begin(health.WorkerID(id))
	if err != nil {
		return nil, err
	}
	return attempt{a}, nil
}

type attempt struct{ a *health.Attempt }

func (t attempt) Progress(tokens int) { t.a.Progress(tokens) }

// Stuck is closed when the attempt should be given up on (its worker was
// judged wedged or hung, or it heard nothing for --wedge-timeout): a proxy
// that has sent no byte to the client cancels it and retries elsewhere.
func (t attempt) Stuck() <-chan struct{} { return t.a.Stuck() }

// OnStuck runs f when Stuck closes, so the proxy waits on no channel.
func (t attempt) OnStuck(f func()) { t.a.OnStuck(f) }

func (t attempt) End(o proxy.Outcome) {
	switch o {
	case proxy.Succeeded:
		t.a.End(health.OutcomeSuccess)
	case proxy.Failed:
		t.a.End(health.OutcomeFailure)
	default:
		t.a.End(health.OutcomeCanceled)
	}
}
