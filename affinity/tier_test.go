package affinity

import (
	"fmt"
	"testing"
	"time"
)

// The first instant of a burst in a tier: every replica places its share of
// the burst before any report arrives. These tests build each replica as a
// fleet of its own (its own index and loads, the peer share set to the
// tier's size), so that no replica sees another's choices, as in that
// instant.

// newTierReplica is one replica of a tier of replicas, before any report.
func newTierReplica(t *testing.T, workers, replicas int) *fleet {
	t.Helper()
	f := newFleet(t, workers, Settings{})
	f.loads.SetPeerShare(replicas-1, 100*time.Millisecond, f.clock)
	return f
}

// session is the first turn of session i: the shared system prompt and a
// task of its own.
func session(system string, i int) string {
	return system + text(fmt.Sprint("task of session ", i), 80)
}

func TestAConversationInATierStaysOnItsCacheWhenItsOwnerIsBusy(t *testing.T) {
	// Its turns reach one replica at a time and each matches the end of
	// the last one, a prefix nothing else went on past: not a shared one,
	// so its hits are not scaled by the tier's size, and a busy owner does
	// not make it hot however many replicas the tier has.
	f := newTierReplica(t, 8, 8)
	conversation := text("a conversation of its own", 400)
	owner := f.route(t, conversation).Worker
	f.setLoad(owner, 40) // past the hot bound, short of the balance threshold
	for turn := range 10 {
		f.clock.Step(hotWindow / 4)
		conversation += text(fmt.Sprint("turn ", turn), 120)
		if d := f.route(t, conversation); d.Worker != owner || !d.Hit {
			t.Fatalf("turn %d went to %d (hit %v): want the owner %d", turn, d.Worker, d.Hit, owner)
		}
	}
}

func TestAReplicasFirstHitOnASharedPrefixSpreadsInATier(t *testing.T) {
	// Each of 8 replicas sends its first request on a new system prompt to
	// the prompt's rendezvous worker; that worker then holds a request from
	// every replica, so a replica's next request that shares the prompt is
	// already one too many there. Alone, a replica keeps it on the owner.
	system := text("a system prompt every session starts with", 400)
	for _, tc := range []struct {
		replicas int
		stays    bool
	}{{1, true}, {8, false}} {
		f := newTierReplica(t, 16, tc.replicas)
		first, g := f.hold(t, session(system, 0))
		defer g.Release()
		second, g := f.hold(t, session(system, 1))
		defer g.Release()
		if stays := second.Worker == first.Worker; stays != tc.stays {
			t.Errorf("%d replicas: the second session went to %d, the first to %d: want on the owner %v",
				tc.replicas, second.Worker, first.Worker, tc.stays)
		}
	}
}

func TestAColdPrefixSpreadsOverAsManyWorkersAsTheTierNeeds(t *testing.T) {
	// 64 replicas each place one first turn on a new system prompt: one
	// worker per 8 replicas (the hot bound) shares them, each session to the
	// one its own text picks. The same prompt on every replica (the
	// rollouts of one task) still goes to one worker.
	system := text("a system prompt every session starts with", 400)
	const replicas, workers = 64, 16
	sessions, same := map[WorkerID]int{}, map[WorkerID]int{}
	for i := range replicas {
		sessions[newTierReplica(t, workers, replicas).route(t, session(system, i)).Worker]++
		same[newTierReplica(t, workers, replicas).route(t, session(system, 0)).Worker]++
	}
	if want := replicas / DefaultHotLoad; len(sessions) != want {
		t.Errorf("64 sessions went to %v: want %d workers", sessions, want)
	}
	for w, n := range sessions {
		if n > 3*DefaultHotLoad {
			t.Errorf("worker %d took %d of 64 sessions (%v): the first instant is not spread", w, n, sessions)
		}
	}
	if len(same) != 1 {
		t.Errorf("the same prompt on 64 replicas went to %v: want one worker", same)
	}
}

func TestATierPlacesAColdPrefixAwayFromAWorkerItJustFilled(t *testing.T) {
	// A replica of 8 counts its one request on a worker 8 times; the next
	// cold prefix whose rendezvous worker that is goes to its next one.
	const workers = 16
	a := text("a first new prefix", 200)
	scratch := newTierReplica(t, workers, 8)
	winner := scratch.route(t, a).Worker
	var b string
	for i := 0; b == ""; i++ {
		if c := text(fmt.Sprint("another new prefix ", i), 200); newTierReplica(t, workers, 8).route(t, c).Worker == winner {
			b = c
		}
	}
	f := newTierReplica(t, workers, 8)
	_, g := f.hold(t, a)
	defer g.Release()
	if d := f.route(t, b); d.Worker == winner {
		t.Fatalf("the second cold prefix went to %d, which this replica's tier share already fills", d.Worker)
	}
}

func TestTheFirstHitsOfATierOnAHotPrefixShareItsNewOwners(t *testing.T) {
	// 64 replicas, each with one request of its own on the prefix's first
	// worker and a second that finds the prefix hot: the second requests
	// are shared out among the new owners by their own text, not all sent
	// to the first new owner.
	system := text("a system prompt every session starts with", 400)
	const replicas = 64
	spread := map[WorkerID]int{}
	for i := range replicas {
		f := newTierReplica(t, 16, replicas)
		first, g := f.hold(t, session(system, 0))
		d, g2 := f.hold(t, session(system, i+1))
		g.Release()
		g2.Release()
		if d.Worker != first.Worker {
			spread[d.Worker]++
		}
	}
	if len(spread) < DefaultHotLoad/2 {
		t.Errorf("the 64 second requests went to %v: want them shared among the new owners", spread)
	}
}

func TestReplicasThatHaveNotHeardOfASessionSendItPastTheSharedPrefixToOneWorker(t *testing.T) {
	// The two sides of a partitioned tier of 8 both know the system prompt
	// every session starts with on the same 8 of 16 workers, and read the
	// loads differently (each its own requests in flight, within the hot
	// bound). A session's first turn placed on one side, as a hit on the
	// prompt, and a later turn placed on the other, which has not heard of
	// the first and matches the prompt alone (too little of the turn for a
	// hit), go to the same worker, whatever each side guesses of its peers'
	// share of its own last requests.
	system := text("a system prompt every session starts with", 400)
	var sides [2]*fleet
	for s := range sides {
		f := newTierReplica(t, 16, 8)
		for w := 1; w <= 8; w++ {
			f.index.Insert(f.router.Prepare("m", []byte(session(system, 100+w)), 0).Hashes, WorkerID(w))
		}
		for w := 1; w <= 16; w++ {
			f.setLoad(WorkerID(w), 3)
		}
		f.setLoad(WorkerID(1+s), 0) // each side's least loaded is another worker
		sides[s] = f
	}
	for i := range 16 {
		first := session(system, i)
		later := first + text(fmt.Sprint("the turns since of ", i), 1200)
		a, b := sides[i%2].route(t, first), sides[1-i%2].route(t, later)
		if !a.Hit || b.Hit {
			t.Fatalf("session %d: the first turn hit %v, the later one %v: want a hit, then a miss", i, a.Hit, b.Hit)
		}
		if a.Worker != b.Worker {
			t.Errorf("session %d: the first turn went to %d on one side, the later turn to %d on the other", i, a.Worker, b.Worker)
		}
		if a.Worker > 8 {
			t.Errorf("session %d went to %d, which does not hold the system prompt", i, a.Worker)
		}
	}
}

func TestASessionPastASharedPrefixSkipsABusyOwner(t *testing.T) {
	// The order yields to load at the hot bound: an owner HotLoad requests
	// above the least loaded takes no session by order.
	system := text("a system prompt every session starts with", 400)
	f := newTierReplica(t, 16, 8)
	for w := 1; w <= 8; w++ {
		f.index.Insert(f.router.Prepare("m", []byte(session(system, 100+w)), 0).Hashes, WorkerID(w))
	}
	busy := f.route(t, session(system, 0)).Worker
	f.setLoad(busy, DefaultHotLoad)
	for i := range 32 {
		if d := f.route(t, session(system, i)); d.Worker == busy {
			t.Fatalf("session %d went to %d, %d requests above the least loaded", i, busy, DefaultHotLoad)
		}
	}
}
