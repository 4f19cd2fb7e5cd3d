package fleet

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// longAnswers are the small sessions answering 256 tokens a turn: a
// worker's engine always holds streams well past their first token.
func longAnswers() workload.AgenticConfig {
	w := smallSessions()
	w.AnswerTokens = 256
	return w
}

// killedMidRun is two gossiping replicas in front of the small fleet
// whose worker 2 dies 2 s into the sessions, under load.
func killedMidRun() Config {
	cfg := smallFleet(affinity.PolicyCacheAware, 2, SyncGossip)
	cfg.Kills = []Kill{{Worker: 2, At: 2 * time.Second}}
	return cfg
}

// TestAKilledWorkersStreamsResumeAndNoRequestIsLost: every request the
// dead engine held goes on elsewhere, retried or resumed, and completes
// with all its tokens; every cut is accounted for, and the resumed
// streams' pause is reported.
func TestAKilledWorkersStreamsResumeAndNoRequestIsLost(t *testing.T) {
	sessions := longAnswers()
	s, err := newSimulation(killedMidRun().withDefaults(), NewAgentic(sessions))
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	res := s.result()
	t.Logf("cuts %d: retried %d, resumed %d, failed %d; pause mean %.1f ms, p99 %.1f ms, max %.1f ms",
		res.Cuts, res.Retried, res.Resumed, res.CutFailed, res.ResumePauseMeanMs, res.ResumePauseP99Ms, res.ResumePauseMaxMs)
	want := sessions.Sessions * sessions.Turns
	if res.Requests != want || res.Errors != 0 || res.CutFailed != 0 {
		t.Errorf("%d requests completed, %d failed (%d of them cut): want all %d completed", res.Requests, res.Errors, res.CutFailed, want)
	}
	if wantTokens := int64(want * sessions.AnswerTokens); res.OutputTokens != wantTokens {
		t.Errorf("clients got %d tokens, want every request's %d: %d", res.OutputTokens, sessions.AnswerTokens, wantTokens)
	}
	if res.Killed != 1 || res.Resumed == 0 {
		t.Fatalf("%d workers killed, %d streams resumed: want 1 killed mid-stream", res.Killed, res.Resumed)
	}
	if res.Cuts != res.Retried+res.Resumed+res.CutFailed {
		t.Errorf("%d cuts, but %d retried, %d resumed and %d failed", res.Cuts, res.Retried, res.Resumed, res.CutFailed)
	}
	if !(res.ResumePauseMeanMs > 0 && res.ResumePauseMeanMs <= res.ResumePauseP99Ms && res.ResumePauseP99Ms <= res.ResumePauseMaxMs) {
		t.Errorf("resume pause mean %.1f ms, p99 %.1f ms, max %.1f ms: want 0 < mean <= p99 <= max",
			res.ResumePauseMeanMs, res.ResumePauseP99Ms, res.ResumePauseMaxMs)
	}
	for _, r := range s.replicas {
		if r.pool.Contains(2) {
			t.Errorf("%s still routes to the dead worker 2", r.name)
		}
		for _, l := range r.own {
			if l.Local() != 0 {
				t.Errorf("%s still counts %d in flight on worker %d", r.name, l.Local(), l.ID())
			}
		}
	}
}

// TestWithoutMigrationTheCutStreamsFail: with migration off, a stream cut
// after its first token fails and is counted; one cut before it is still
// retried, and every other request completes.
func TestWithoutMigrationTheCutStreamsFail(t *testing.T) {
	sessions := longAnswers()
	cfg := killedMidRun()
	cfg.MigrationLimit = MigrationOff
	res := run(t, cfg, sessions)
	if res.Cuts == 0 || res.CutFailed == 0 || res.Resumed != 0 {
		t.Fatalf("%d cuts, %d failed, %d resumed: want cut streams failed, none resumed", res.Cuts, res.CutFailed, res.Resumed)
	}
	if res.Errors != res.CutFailed || res.CutFailed != res.Cuts-res.Retried {
		t.Errorf("%d errors, %d cut requests failed, %d cuts of which %d retried: want every cut not retried failed, and nothing else",
			res.Errors, res.CutFailed, res.Cuts, res.Retried)
	}
	if wantTokens := int64(res.Requests * sessions.AnswerTokens); res.OutputTokens != wantTokens {
		t.Errorf("clients of the %d completed requests got %d tokens, want %d", res.Requests, res.OutputTokens, wantTokens)
	}
	if res.ResumePauseMaxMs != 0 {
		t.Errorf("a resume pause of %.1f ms without migration", res.ResumePauseMaxMs)
	}
}

// TestSameKillsGiveTheSameResult: cuts, retries and continuations repeat
// run to run, through the door and the placer as through independent
// replicas.
func TestSameKillsGiveTheSameResult(t *testing.T) {
	gossip := smallFleet(affinity.PolicyCacheAware, 4, SyncGossip)
	gossip.Door, gossip.Placer = true, true
	none := smallFleet(affinity.PolicyCacheAware, 3, SyncNone)
	none.MigrationLimit = 1
	for _, cfg := range []Config{gossip, none} {
		cfg.Seed = 7
		cfg.Kills = []Kill{{Worker: 2, At: 2 * time.Second}, {Worker: 5, At: 3 * time.Second}}
		first, second := run(t, cfg, longAnswers()), run(t, cfg, longAnswers())
		if first.Cuts == 0 || first.Resumed == 0 {
			t.Errorf("sync=%s: %d cuts, %d resumed: want streams cut and resumed", cfg.Sync, first.Cuts, first.Resumed)
		}
		if !reflect.DeepEqual(first, second) {
			t.Errorf("sync=%s: two runs differ:\n%+v\n%+v", cfg.Sync, first, second)
		}
	}
}

func TestInvalidKillsAreRefused(t *testing.T) {
	for name, kills := range map[string][]Kill{
		"no worker":   {{Worker: 0}},
		"before":      {{Worker: 1, At: -time.Second}},
		"twice":       {{Worker: 1}, {Worker: 1, At: time.Second}},
		"beyond both": {{Worker: 5}},
	} {
		if err := (Config{Workers: 4, Kills: kills}).Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: error %v, want ErrBadConfig", name, err)
		}
	}
	split := Config{Prefill: 1, Decode: 1, Kills: []Kill{{Worker: 1}}}
	if err := split.Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("a kill in a split fleet: error %v, want ErrBadConfig", err)
	}
}

// TestKillsLoseNoRequestWhateverTheTiming: three workers of six die at
// instants spread over the run, through the door and the placer, whose
// answers may come late or not at all, at every migration limit: every
// request completes with all its tokens or fails counted, and no guard is
// left held. Seed 7 at 30 ms has the races: a placer's answer naming a
// worker that died meanwhile, and a retried request's previous question
// still ending on the agenda.
func TestKillsLoseNoRequestWhateverTheTiming(t *testing.T) {
	sessions := longAnswers()
	for seed := int64(1); seed <= 8; seed++ {
		for _, delay := range []time.Duration{time.Millisecond, 30 * time.Millisecond} {
			cfg := smallFleet(affinity.PolicyCacheAware, 4, SyncGossip)
			cfg.Door, cfg.Placer, cfg.PlacerAnswerLoss, cfg.GossipDelay, cfg.Seed = seed%2 == 0, true, 0.3, delay, seed
			at := time.Duration(seed) * 300 * time.Millisecond
			cfg.Kills = []Kill{{Worker: affinity.WorkerID(1 + seed%6), At: at},
				{Worker: affinity.WorkerID(1 + (seed+2)%6), At: at + 7*time.Millisecond},
				{Worker: affinity.WorkerID(1 + (seed+4)%6), At: at + 500*time.Millisecond}}
			cfg.MigrationLimit = int(seed%3) - 1 // off, 0 (the default) and 1
			s, err := newSimulation(cfg.withDefaults(), NewAgentic(sessions))
			if err != nil {
				t.Fatal(err)
			}
			s.run()
			res := s.result()
			if res.Requests+res.Errors != sessions.Sessions*sessions.Turns || len(s.inflight) != 0 {
				t.Errorf("seed %d, delay %v: %d completed and %d failed, %d still in flight: want %d in all",
					seed, delay, res.Requests, res.Errors, len(s.inflight), sessions.Sessions*sessions.Turns)
			}
			if res.OutputTokens != int64(res.Requests*sessions.AnswerTokens) || res.Cuts == 0 {
				t.Errorf("seed %d, delay %v: %d tokens for %d completed requests after %d cuts: want all their tokens",
					seed, delay, res.OutputTokens, res.Requests, res.Cuts)
			}
			for _, r := range s.replicas {
				for _, l := range r.own {
					if l.Local() != 0 {
						t.Errorf("seed %d, delay %v: %s still counts %d in flight on worker %d", seed, delay, r.name, l.Local(), l.ID())
					}
				}
			}
		}
	}
}
