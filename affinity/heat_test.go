package affinity

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// burstOn holds n requests sharing prefix (each with its own tail) on f, so
// the prefix's last block is the deepest each matches, and
// returns how many each worker took, and the guards to release.
func burstOn(t *testing.T, f *fleet, prefix string, n int) (map[WorkerID]int, []*Guard) {
	t.Helper()
	took := map[WorkerID]int{}
	var guards []*Guard
	for i := range n {
		d, g := f.hold(t, prefix+text(fmt.Sprint(i, " own part"), 40)) // the tails share no block
		took[d.Worker]++
		guards = append(guards, g)
	}
	return took, guards
}

func releaseAll(guards []*Guard) {
	for _, g := range guards {
		g.Release()
	}
}

func TestAHotPrefixSpreadsToASecondOwnerEveryReplicaAgreesOn(t *testing.T) {
	prefix := text("a long system prompt shared by forty rollouts", 400)
	const owners = 3 // at most, so that both replicas reach the cap
	th := DefaultThresholds()
	th.HotOwners = owners
	a, b := newFleet(t, 8, Settings{Thresholds: th}), newFleet(t, 8, Settings{Thresholds: th})
	owner := a.route(t, prefix).Worker
	// b has heard of the owner from a, as a replica of the tier would, and
	// the two see the other workers' loads differently (their views of the
	// peers' reports differ), in opposite orders.
	req := b.router.Prepare("m", []byte(prefix), 0)
	b.index.Insert(req.Hashes, owner)
	for w := WorkerID(1); w <= 8; w++ {
		if w != owner {
			a.setLoad(w, int64(w))
			b.setLoad(w, int64(9-w))
		}
	}

	tookA, guardsA := burstOn(t, a, prefix, 40)
	tookB, guardsB := burstOn(t, b, prefix, 40)
	defer releaseAll(guardsA)
	defer releaseAll(guardsB)
	workersA, workersB := slices.Sorted(maps.Keys(tookA)), slices.Sorted(maps.Keys(tookB))
	if len(workersA) != owners || !slices.Equal(workersA, workersB) {
		t.Fatalf("replica a spread the burst over %v, b over %v: want the same %d workers", tookA, tookB, owners)
	}
	if tookA[owner] >= 40 || tookA[owner] < 8 {
		t.Fatalf("the owner %d took %d of 40 (%v): want it to keep its share and give the rest away", owner, tookA[owner], tookA)
	}
	for w, n := range tookA {
		if n > 40/owners+2*DefaultHotLoad {
			t.Fatalf("worker %d took %d of 40 (%v): the burst is not spread", w, n, tookA)
		}
	}
}

func TestAHotPrefixStopsSpreadingWhenTheBurstPasses(t *testing.T) {
	f := newFleet(t, 8, Settings{})
	prefix := text("a task prompt shared by a group of rollouts", 400)
	f.route(t, prefix)
	// 8 requests heat the prefix and load its owner; the next 8 go to the
	// second owner until it is as loaded.
	took, guards := burstOn(t, f, prefix, 2*DefaultHotLoad)
	releaseAll(guards)
	if len(took) != 2 {
		t.Fatalf("the burst went to %v: want two owners", took)
	}
	owners := slices.Sorted(maps.Keys(took))
	f.clock.Step(2 * hotWindow)
	// The owners are busy with other work, as busy as during the burst; the
	// prefix itself is cold now: its requests stay with the workers that hold
	// it and go nowhere new.
	for _, w := range owners {
		f.setLoad(w, 20)
	}
	for i := range 5 {
		d := f.route(t, prefix+text(fmt.Sprint(100+i, " later"), 40))
		if !slices.Contains(owners, d.Worker) || !d.Hit {
			t.Fatalf("request %d after the burst went to %d (hit %v): want one of the owners %v", i, d.Worker, d.Hit, owners)
		}
		f.clock.Step(hotWindow)
	}
}

func TestAColdPrefixKeepsOneOwner(t *testing.T) {
	prefix := text("a conversation", 400)
	t.Run("its owner busy with other prefixes", func(t *testing.T) {
		f := newFleet(t, 8, Settings{})
		owner := f.route(t, prefix).Worker
		f.setLoad(owner, 40) // far past the hot bound, short of the balance threshold
		for turn := range 10 {
			f.clock.Step(hotWindow / 4)
			if d := f.route(t, prefix+text("turn", 40+turn)); d.Worker != owner || !d.Hit {
				t.Fatalf("turn %d went to %d (hit %v): want the owner %d", turn, d.Worker, d.Hit, owner)
			}
		}
	})
	t.Run("many requests one after another", func(t *testing.T) {
		f := newFleet(t, 8, Settings{})
		owner := f.route(t, prefix).Worker
		for i := range 40 {
			if d := f.route(t, prefix+text("next", 40+i)); d.Worker != owner || !d.Hit {
				t.Fatalf("request %d went to %d (hit %v): want the owner %d", i, d.Worker, d.Hit, owner)
			}
		}
	})
}

func TestAReplicaOfATierCountsThePeersShareOfAPrefixsHeat(t *testing.T) {
	prefix := text("a system prompt", 400)
	firstSpread := func(peers int) int {
		f := newFleet(t, 8, Settings{})
		f.loads.SetPeerShare(peers, 100*time.Millisecond, f.clock)
		owner := f.route(t, prefix).Worker
		f.clock.Step(time.Second)
		for i := range 40 {
			d, g := f.hold(t, prefix+text(fmt.Sprint("rollout", i), 40))
			defer g.Release()
			if d.Worker != owner {
				return i
			}
		}
		return -1
	}
	alone, inTier := firstSpread(0), firstSpread(3)
	t.Logf("the burst first left its owner at request %d alone, %d with 3 peers", alone, inTier)
	if inTier < 0 || alone < 0 || inTier >= alone {
		t.Fatalf("the burst first left its owner at request %d alone and %d with 3 peers: want earlier in the tier", alone, inTier)
	}
}

func TestSpreadingIsOffAtHotLoadZero(t *testing.T) {
	f := newFleet(t, 8, Settings{Thresholds: withoutHotSpread()})
	prefix := text("a long system prompt shared by forty rollouts", 400)
	f.route(t, prefix)
	took, guards := burstOn(t, f, prefix, 40)
	defer releaseAll(guards)
	if len(took) != 1 {
		t.Fatalf("the burst went to %v with spreading off: want one worker", took)
	}
}

func TestAHotPrefixSpreadsOnlyAsFarAsItsLoadAsks(t *testing.T) {
	f := newFleet(t, 16, Settings{})
	prefix := text("a system prompt every session starts with", 400)
	f.route(t, prefix)
	took, guards := burstOn(t, f, prefix, 40)
	defer releaseAll(guards)
	// 40 requests, a new owner whenever all hold 8: five owners of 8.
	if len(took) != 5 {
		t.Fatalf("40 requests went to %v: want five owners of about 8 each", took)
	}
}
