package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// TestPriorityFigures prints, in virtual time (no machine noise), what the
// engine itself allows in scripts/prioritybench's priority scenario: one
// closed-loop interactive client (16-token prompts, 8 tokens out, 100 ms
// think) alone, then under a bulk flood (256-token prompts, 256 out, always
// more waiting at the router), with the router's rule of each mechanism
// played around the engine (vLLM v1's priority scheduling: the engine
// orders its queue by priority and never preempts for a waiting request).
// The router's own share (HTTP, admission) is not in it. It prints a
// Markdown table on stdout; run with
// SIM_PRIORITY_FIGURES=1 go test -run TestPriorityFigures -v ./sim/
func TestPriorityFigures(t *testing.T) {
	if os.Getenv("SIM_PRIORITY_FIGURES") == "" {
		t.Skip("set SIM_PRIORITY_FIGURES=1 to print the figures")
	}
	const horizon = 600 * time.Second
	seeds := []uint64{1, 2, 3}
	fmt.Printf("| router rule (%v of virtual time, seeds %v) | engine max_num_seqs | interactive TTFT p50 ms (mean) | p99 ms (worst) | p99 / alone (worst) | (mean) | waiting for the step in progress (mean ms) | then for a slot and its own step (mean ms) | bulk tokens/s | bulk streams cut per minute |\n", horizon, seeds)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	alone := map[uint64]time.Duration{}
	var ownAlone, ownShared time.Duration
	for _, m := range priorityMechanisms {
		var p50, worst, stepWait, rest time.Duration
		var worstRatio, sumRatio, tokens, cut float64
		for _, seed := range seeds {
			r := priorityScenario(m, seed, horizon)
			ttfts := slices.Clone(r.ttft)
			slices.Sort(ttfts)
			p99 := ttfts[len(ttfts)*99/100]
			if m.bulkMax == 0 {
				alone[seed] = p99
			}
			ratio := float64(p99) / float64(alone[seed])
			p50 += ttfts[len(ttfts)/2] / time.Duration(len(seeds))
			worst, worstRatio, sumRatio = max(worst, p99), max(worstRatio, ratio), sumRatio+ratio
			stepWait += meanOf(r.stepWait) / time.Duration(len(seeds))
			rest += meanOf(r.rest) / time.Duration(len(seeds))
			tokens += float64(r.bulkTokens) / horizon.Seconds() / float64(len(seeds))
			cut += float64(r.cut) / horizon.Minutes() / float64(len(seeds))
		}
		switch {
		case m.bulkMax == 0:
			ownAlone = rest
		case !m.shed && m.bulkMax < m.totalMax && m.seqs == 4:
			ownShared = rest
		}
		fmt.Printf("| %s | %d | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.0f | %.1f |\n", m.name, m.seqs, ms(p50), ms(worst),
			worstRatio, sumRatio/float64(len(seeds)), ms(stepWait), ms(rest), tokens, cut)
	}
	fmt.Printf("\nThe floor: with the slot kept idle the interactive request never waits for a slot, yet its own step "+
		"takes %.1f ms against %.1f ms alone (%.2fx) with no wait at all, since it carries the bulk decodes; the wait for "+
		"the step in progress (a bulk prefill now and then) comes on top.\n", ms(ownShared), ms(ownAlone),
		float64(ownShared)/float64(ownAlone))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func meanOf(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(max(len(ds), 1))
}

// priorityMechanism is a router rule around one engine.
type priorityMechanism struct {
	name     string
	seqs     int // the engine's max_num_seqs
	bulkMax  int // bulk requests the router lets in while no interactive one runs
	totalMax int // bulk admissions stop while bulk and interactive in flight reach it
	// shed: an interactive request that finds bulk holding the reserved
	// slot makes the router abort the latest admitted bulk request and
	// queue it again first; resume: sent again as its prompt and the tokens
	// it had (the router splicing the streams), else from the start, its
	// client's stream cut if it had begun.
	shed, resume bool
}

var priorityMechanisms = []priorityMechanism{
	{name: "interactive alone", seqs: 4},
	{name: "reserved slot kept idle (bulk held to 3)", seqs: 4, bulkMax: 3, totalMax: 4},
	{name: "reserved slot lent (--lend-reserved-slots): interactive waits at the engine for a slot", seqs: 4, bulkMax: 4, totalMax: 4},
	{name: "slot lent, router aborts the borrower and restarts it", seqs: 4, bulkMax: 4, totalMax: 4, shed: true},
	{name: "slot lent, router aborts the borrower and resumes it", seqs: 4, bulkMax: 4, totalMax: 4, shed: true, resume: true},
	{name: "reserved slot above the engine's bulk share (engine of 5, bulk held to 4)", seqs: 5, bulkMax: 4, totalMax: 5},
}

type priorityResult struct {
	ttft, stepWait, rest []time.Duration
	bulkTokens           int // tokens of bulk requests whose client saw them whole
	cut                  int // bulk streams cut after their first token
}

// bulkJob is one bulk request as the router holds it.
type bulkJob struct {
	prompt []byte
	left   int // tokens still to generate
	done   int // tokens its client has had
	gen    int // tokens generated since it was last sent
}

const bulkOut = 256

// priorityScenario drives one engine under m's router rule until horizon.
// The interactive client thinks 100 ms give or take 10 (drawn from seed),
// and the first bulk requests ask for a quarter, a half, three quarters and
// all of the bulk output, so that the bulk slots do not free in step.
func priorityScenario(m priorityMechanism, seed uint64, horizon time.Duration) priorityResult {
	d := &priorityDriver{m: m, rng: rand.New(rand.NewPCG(seed, 3)), running: map[RequestID]*bulkJob{}, nextID: 2,
		e: NewEngine(Config{MaxNumSeqs: m.seqs, PriorityScheduling: true}), nextInter: time.Second}
	d.refill(0)
	for {
		at, ok := d.e.NextEventAt()
		if ok && at <= d.nextInter {
			d.handle(d.e.Advance(at))
			continue
		}
		if d.nextInter > horizon {
			return d.res
		}
		d.handle(d.e.Advance(d.nextInter))
		d.sendInteractive(d.nextInter)
		d.nextInter = horizon + time.Hour
	}
}

// interactiveID is the interactive client's request, one at a time.
const interactiveID = RequestID(1)

// priorityDriver plays the router and the clients around one engine.
type priorityDriver struct {
	m        priorityMechanism
	rng      *rand.Rand
	e        *Engine
	res      priorityResult
	requeued []*bulkJob // aborted, to go again first
	running  map[RequestID]*bulkJob
	order    []RequestID // bulk in flight, oldest admitted first
	nextID   RequestID
	started  int // bulk requests started from scratch
	// the interactive request: in flight or not, when it was sent, when
	// the step in progress then ended, when the next one goes
	interIn                     int
	interAt, stepEnd, nextInter time.Duration
}

func (d *priorityDriver) submit(j *bulkJob, now time.Duration) {
	_ = d.e.Submit(Request{ID: d.nextID, Prompt: j.prompt, MaxTokens: j.left, StreamTokens: true, Priority: 3}, now)
	j.gen = 0
	d.running[d.nextID] = j
	d.order = append(d.order, d.nextID)
	d.nextID++
}

// refill sends bulk while the router's rule lets it, the aborted first.
func (d *priorityDriver) refill(now time.Duration) {
	for len(d.order) < d.m.bulkMax && len(d.order)+d.interIn < d.m.totalMax {
		if len(d.requeued) > 0 {
			j := d.requeued[0]
			d.requeued = d.requeued[1:]
			d.submit(j, now)
			continue
		}
		d.started++
		d.submit(&bulkJob{prompt: text(int(d.nextID), 1024), left: bulkOut * min(d.started, 4) / 4}, now)
	}
}

func (d *priorityDriver) sendInteractive(now time.Duration) {
	d.interAt, d.interIn = now, 1
	d.stepEnd, _ = d.e.NextEventAt()
	if d.m.shed && len(d.order) >= d.m.totalMax {
		d.shed(now)
	}
	_ = d.e.Submit(Request{ID: interactiveID, Prompt: text(int(d.nextID), 64), MaxTokens: 8, Priority: 1}, now)
	d.nextID++
}

// shed aborts the latest admitted bulk request and queues it again first:
// resumed from the tokens it had, or restarted, its stream cut if begun.
func (d *priorityDriver) shed(now time.Duration) {
	id := d.order[len(d.order)-1]
	j := d.running[id]
	d.e.Cancel(id, now)
	delete(d.running, id)
	d.order = d.order[:len(d.order)-1]
	switch {
	case d.m.resume:
		// The engine's text is 4 bytes a token: the tokens it had are appended to the prompt.
		j.prompt = append(slices.Clip(j.prompt), text(int(id), 4*j.gen)...)
		j.left -= j.gen
	case j.done > 0:
		d.res.cut++
		j.left, j.done = bulkOut, 0
	default:
		j.left = bulkOut
	}
	d.requeued = append([]*bulkJob{j}, d.requeued...)
}

func (d *priorityDriver) handle(evs []Event) {
	for _, ev := range evs {
		if ev.ID == interactiveID {
			d.interactiveEvent(ev)
			continue
		}
		j := d.running[ev.ID]
		switch {
		case j == nil:
		case ev.Kind != Done:
			j.done++
			j.gen++
		default:
			d.res.bulkTokens += j.done
			delete(d.running, ev.ID)
			d.order = slices.DeleteFunc(d.order, func(id RequestID) bool { return id == ev.ID })
			d.refill(ev.At)
		}
	}
}

func (d *priorityDriver) interactiveEvent(ev Event) {
	switch ev.Kind {
	case FirstToken:
		wait := max(d.stepEnd-d.interAt, 0)
		d.res.ttft = append(d.res.ttft, ev.At-d.interAt)
		d.res.stepWait = append(d.res.stepWait, wait)
		d.res.rest = append(d.res.rest, ev.At-d.interAt-wait)
	case Done:
		d.interIn = 0
		d.nextInter = ev.At + 90*time.Millisecond + time.Duration(d.rng.Int64N(int64(20*time.Millisecond)))
		d.refill(ev.At)
	}
}
