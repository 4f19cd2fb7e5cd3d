package affinity

import "time"

// The residency of LoRA adapters on a worker, as the table tells it: which
// adapters are in its engine's slots (vLLM keeps the max_lora adapters run
// most recently, and swaps out the least recently run one no running
// request holds), and whether it has room for another.

// slotState is what the table says of one candidate for one adapter.
type slotState struct {
	resident bool // the adapter is in the worker's slots
	// room: the adapter holds a slot, or a slot served no other adapter
	// within AdapterWindow.
	room bool
}

// state is what the table says of adapter k on worker w at now: whether k
// is among the Slots adapters active there most recently (active within
// AdapterWindow, when Slots is unknown), and whether it has room for k.
func (a *Adapters) state(w WorkerID, k AdapterKey, now time.Time) slotState {
	if a == nil {
		return slotState{room: true}
	}
	e := a.worker(w)
	if e == nil {
		return slotState{room: true}
	}
	slots := 0
	if v := e.view.Load(); v != nil {
		slots = v.Slots
	}
	r := residency{key: k, now: now}
	a.tally(w, &r)
	return r.state(slots)
}

// Busy is how many adapters hold a slot of w's engine now, by the table:
// running or waiting in its latest reading, or with requests of the tier
// in flight there.
func (a *Adapters) Busy(w WorkerID) int {
	r := residency{now: a.clock.Now()}
	a.tally(w, &r)
	return r.busyOthers
}

// Slots is the max_lora of w's engine as the table knows it, 0 unknown.
func (a *Adapters) Slots(w WorkerID) int {
	if e := a.worker(w); e != nil {
		if v := e.view.Load(); v != nil {
			return v.Slots
		}
	}
	return 0
}

// tally adds what the table knows of w's adapters to r.
func (a *Adapters) tally(w WorkerID, r *residency) {
	e := a.worker(w)
	if e == nil {
		return
	}
	if v := e.view.Load(); v != nil {
		for _, s := range v.Seen {
			r.add(s.Key, s.Last, s.BusyUntil.After(r.now))
		}
	}
	for key, u := range *e.uses.Load() {
		r.add(key, u.lastAt(r.now), u.inflight.Load() > 0)
	}
}

// residency tallies one worker's adapters against one adapter, key: how
// recently key was active there, how many adapters were active since, and
// how many others hold a slot now. An adapter seen by the tier and used by
// this replica is counted once, at its latest.
type residency struct {
	key        AdapterKey
	now        time.Time
	last       time.Time // key's; zero when not seen
	busy       bool      // key's
	others     []adapterMark
	busyOthers int
}

// adapterMark is another adapter's latest activity on the worker.
type adapterMark struct {
	key  AdapterKey
	last time.Time
	busy bool
}

func (r *residency) add(k AdapterKey, last time.Time, busy bool) {
	if busy {
		last = r.now
	}
	if k == r.key {
		r.last, r.busy = laterOf(r.last, last), r.busy || busy
		return
	}
	for i := range r.others {
		if o := &r.others[i]; o.key == k {
			if busy && !o.busy {
				r.busyOthers++
			}
			o.last, o.busy = laterOf(o.last, last), o.busy || busy
			return
		}
	}
	r.others = append(r.others, adapterMark{key: k, last: last, busy: busy})
	if busy {
		r.busyOthers++
	}
}

// state judges the tally for an engine of slots adapters (0: unknown).
func (r *residency) state(slots int) slotState {
	if slots == 0 { // no bound known: a worker keeps an adapter it ran lately
		return slotState{resident: !r.last.IsZero() && (r.busy || r.now.Sub(r.last) < AdapterWindow), room: true}
	}
	if r.last.IsZero() {
		return slotState{room: r.activeOthers() < slots}
	}
	since := 0 // other adapters active after key: LRU would evict key after slots of them
	for _, o := range r.others {
		if o.last.After(r.last) {
			since++
		}
	}
	resident := since < slots && (r.busy || r.busyOthers < slots)
	return slotState{resident: resident, room: resident || r.activeOthers() < slots}
}

// AdapterWindow is how long after its last request an adapter keeps its
// slot of a worker from new adapters: a worker whose slots all served
// other adapters this recently has no room for a new one while another
// has. An agent's next turn comes within seconds; an adapter given the
// slot of one idle between two turns swaps it out, and the next turn,
// finding it gone, goes on to swap out another's (without the window a
// tier swapped more than adapter-blind routing did).
const AdapterWindow = 10 * time.Second

// activeOthers is how many other adapters were active within
// AdapterWindow (or hold a slot now).
func (r *residency) activeOthers() int {
	n := 0
	for _, o := range r.others {
		if o.busy || r.now.Sub(o.last) < AdapterWindow {
			n++
		}
	}
	return n
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
