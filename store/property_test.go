package store

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// randomLog returns n log entries over a small set of URLs and ids, so that
// adds repeat, removals hit and miss, and some entries are refused.
func randomLog(rng *rand.Rand, n int) [][]byte {
	log := make([][]byte, n)
	for i := range log {
		log[i] = randomEntry(rng)
	}
	return log
}

func randomEntry(rng *rand.Rand) []byte {
	id := WorkerID(rng.IntN(10))
	roles := []Role{"", RoleRegular, RolePrefill, RoleDecode}
	states := []WorkerState{StateActive, StateDraining, "bogus"}
	var cmd Command
	switch rng.IntN(10) {
	case 0, 1, 2, 3:
		cmd = NewAddWorker(AddWorker{URL: fmt.Sprintf("http://w%d:8000", rng.IntN(8)), Role: roles[rng.IntN(4)]})
	case 4, 5:
		cmd = NewRemoveWorker(id)
	case 6, 7:
		cmd = NewSetWorkerState(id, states[rng.IntN(3)])
	case 8:
		cmd = NewSetRoutingConfig(RoutingConfig{BlockSize: rng.IntN(3) * 128, CacheThreshold: 0.3, BalanceRelThreshold: 1.5})
	default:
		return []byte(`{"v":1,"kind":"garbage"`)
	}
	data, err := json.Marshal(cmd) // unvalidated on purpose: invalid ones must be refused alike
	if err != nil {
		panic(err)
	}
	return data
}

func applyLog(f *FSM, log [][]byte, firstIndex uint64) []Result {
	results := make([]Result, len(log))
	for i, data := range log {
		results[i] = applyEntry(f, firstIndex+uint64(i), data)
	}
	return results
}

// errText makes results comparable: errors are compared by their text.
func errText(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d %v %d %v", r.ID, r.Created, r.Index, r.Err)
	}
	return out
}

func TestApplyingTheSameLogFromARestoredSnapshotGivesTheSameRegistry(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		log := randomLog(rng, 1+rng.IntN(60))
		cut := rng.IntN(len(log) + 1)

		whole := NewFSM()
		wholeResults := applyLog(whole, log, 1)

		prefix := NewFSM()
		applyLog(prefix, log[:cut], 1)
		snap := snapshotBytes(t, prefix)

		for replay := range 2 {
			restored := NewFSM()
			if err := restoreBytes(restored, snap); err != nil {
				t.Fatalf("seed %d: restore: %v", seed, err)
			}
			results := applyLog(restored, log[cut:], uint64(cut)+1)
			if got, want := stateOf(t, restored.View()), stateOf(t, whole.View()); got != want {
				t.Fatalf("seed %d cut %d replay %d: registry differs\n got %s\nwant %s", seed, cut, replay, got, want)
			}
			if !reflect.DeepEqual(errText(results), errText(wholeResults[cut:])) {
				t.Fatalf("seed %d cut %d replay %d: results differ", seed, cut, replay)
			}
		}
		checkInvariants(t, whole.View(), wholeResults)
	}
}

// checkInvariants pins what every reachable registry satisfies.
func checkInvariants(t *testing.T, reg *Registry, results []Result) {
	t.Helper()
	created := 0
	for _, r := range results {
		if r.Created {
			created++
		}
	}
	if want := WorkerID(created + 1); reg.NextID() != want {
		t.Fatalf("next id %d, want %d (one per created worker)", reg.NextID(), want)
	}
	urls := map[string]bool{}
	prev := WorkerID(0)
	for _, w := range reg.Workers() {
		if w.ID <= prev || w.ID >= reg.NextID() || urls[w.URL] {
			t.Fatalf("invariant broken at worker %+v (prev id %d)", w, prev)
		}
		urls[w.URL], prev = true, w.ID
	}
}
