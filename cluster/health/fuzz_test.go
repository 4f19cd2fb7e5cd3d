package health

import (
	"fmt"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
)

// FuzzBreaker drives the breaker with arbitrary interleavings of admissions,
// outcomes (including outcomes of attempts from earlier generations), verdict
// trips and time, and checks its invariants after every step.
func FuzzBreaker(f *testing.F) {
	f.Add([]byte{0, 2, 0, 2, 0, 2, 4, 4, 0, 1, 0, 1, 0, 1})
	f.Add([]byte{5, 4, 4, 0, 0, 0, 0, 3, 3, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		b := breaker{policy: breakerPolicy{failures: 3, successes: 2, trials: 2, timeout: 10}}
		var out []admitted
		var now int64
		for i, op := range ops {
			switch op % 6 {
			case 0:
				if gen, trial, ok := b.admit(); ok {
					out = append(out, admitted{gen, trial})
				}
			case 1, 2, 3:
				if len(out) == 0 {
					continue
				}
				k := int(op/6) % len(out)
				a := out[k]
				out = append(out[:k], out[k+1:]...)
				b.record(Outcome(op%6-1), a.gen, a.trial, now)
			case 4:
				now += int64(op/6) % 12
				b.expire(now)
			case 5:
				b.trip(now)
			}
			if err := breakerInvariant(&b, out, now); err != nil {
				t.Fatalf("after op %d (%d): %v; breaker %+v", i, op, err, b)
			}
		}
	})
}

// admitted is an attempt the breaker let through and that has not ended.
type admitted struct {
	gen   uint64
	trial bool
}

func breakerInvariant(b *breaker, out []admitted, now int64) error {
	trials := 0
	for _, a := range out {
		if a.trial && a.gen == b.gen {
			trials++
		}
	}
	switch {
	case b.state > CircuitHalfOpen:
		return fmt.Errorf("state %d", b.state)
	case b.state == CircuitHalfOpen && b.trialsInUse != trials:
		return fmt.Errorf("trialsInUse %d, outstanding trials %d", b.trialsInUse, trials)
	case b.trialsInUse < 0 || b.trialsInUse > b.policy.trials:
		return fmt.Errorf("trialsInUse %d out of [0,%d]", b.trialsInUse, b.policy.trials)
	case b.state == CircuitClosed && b.failures >= b.policy.failures:
		return fmt.Errorf("closed with %d consecutive failures", b.failures)
	case b.state == CircuitHalfOpen && b.successes >= b.policy.successes:
		return fmt.Errorf("half-open with %d successes", b.successes)
	case b.state == CircuitOpen && b.openedAt > now:
		return fmt.Errorf("opened at %d, in the future of %d", b.openedAt, now)
	case stateOf(b.word()) != b.state || genOf(b.word()) != b.gen:
		return fmt.Errorf("word %x does not round-trip", b.word())
	}
	return nil
}

// FuzzRemoteVerdicts feeds arbitrary verdict reports, as gossip from other
// replicas might carry, and checks that each worker's count of remote verdicts
// is the number of origins whose latest report names it, that it is out
// exactly when they are a quorum of the live replicas (each origin and this
// one), and that forgetting every origin restores eligibility.
func FuzzRemoteVerdicts(f *testing.F) {
	f.Add([]byte{0, 3, 1, 1, 2, 2, 1, 0, 0})
	f.Add([]byte{255, 7, 1, 200, 2, 3, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := New(testConfig(), testingclock.NewFakeClock(t0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetWorkers(targets(t, 4)); err != nil {
			t.Fatal(err)
		}
		checkRound(t, m)
		latest := map[string][]Verdict{}
		for len(data) >= 2 {
			origin := fmt.Sprintf("r%d", data[0]%4)
			n := min(int(data[1]%5), (len(data)-2)/2)
			var vs []Verdict
			for i := range n {
				vs = append(vs, Verdict{Worker: WorkerID(data[2+2*i] % 6), Kind: VerdictKind(data[3+2*i] % 4)})
			}
			data = data[2+2*n:]
			m.SetRemoteVerdicts(origin, vs)
			latest[origin] = vs
			if err := remoteInvariant(m, latest); err != nil {
				t.Fatal(err)
			}
		}
		for origin := range latest {
			m.ForgetOrigin(origin)
		}
		for _, st := range m.Statuses() {
			if !st.Eligible || st.RemoteVerdicts != 0 {
				t.Fatalf("worker %d after every origin was forgotten: %+v", st.ID, st)
			}
		}
	})
}

func remoteInvariant(m *Monitor, latest map[string][]Verdict) error {
	for _, st := range m.Statuses() {
		want := 0
		for _, vs := range latest {
			for _, v := range vs {
				if v.Worker == st.ID && v.Kind.known() {
					want++
					break
				}
			}
		}
		origins := 0
		for _, vs := range latest {
			if len(vs) > 0 {
				origins++
			}
		}
		if st.RemoteVerdicts != want || st.Eligible != (want < quorum(origins+1)) {
			return fmt.Errorf("worker %d: %d remote verdicts, eligible %v; want %d", st.ID, st.RemoteVerdicts, st.Eligible, want)
		}
	}
	return nil
}
