package main

import (
	"fmt"
	"strings"
	"time"
)

// priorityRun is one configuration of the priority scenario.
type priorityRun struct {
	short   string // its name in -runs
	name    string
	flags   []string // the router's
	workers []string // the workersim's
	flood   bool
}

// priorityRow is what one run of the priority scenario measured.
type priorityRow struct {
	p50, p99                time.Duration
	engineP99               time.Duration // of the TTFT less the router's queue time
	ratio                   float64       // p99 over the same round's alone p99
	requests                int
	bulkTokens              float64 // per second
	busy, waiting, queued   float64
	idle                    float64 // share of samples with an idle slot while requests waited
	preemptions             float64 // the engine's own
	resumed                 float64 // the router's preemptions by resume
	bulkFailed              int     // bulk streams that failed or were cut
	ttft                    []time.Duration
	beforeFirst             string
	loadStart, loadFinished string
}

var priorityRuns = func() []priorityRun {
	reserved := []string{"--priority-reserved", "interactive=1"}
	priorityEngine := []string{"--scheduling-policy", "priority"}
	return []priorityRun{
		{"alone", "interactive alone", reserved, nil, false},
		{"fifo", "+ bulk flood, one class (FIFO, no saturation signal)", []string{"--priority-classes", "", "--engine-scrape-interval-secs", "0"}, nil, true},
		{"idle", "+ bulk flood, interactive=1 reserved, kept idle for it", reserved, nil, true},
		{"lent", "+ bulk flood, interactive=1 reserved and lent to bulk (--engine-priority --lend-reserved-slots)",
			append([]string{"--engine-priority", "--lend-reserved-slots"}, reserved...), priorityEngine, true},
		{"preempt", "+ bulk flood, interactive=1 reserved, lent, taken back by preemption (--engine-priority --lend-reserved-slots --preempt-by-resume)",
			append([]string{"--engine-priority", "--lend-reserved-slots", "--preempt-by-resume"}, reserved...), priorityEngine, true},
	}
}()

// selectedRuns are the priority runs -runs names, in their order.
func selectedRuns() []priorityRun {
	if *runs == "" {
		return priorityRuns
	}
	var out []priorityRun
	for _, r := range priorityRuns {
		if strings.Contains(","+*runs+",", ","+r.short+",") {
			out = append(out, r)
		}
	}
	return out
}

// priority: one engine of 4 sequences; a bulk flood of 20 closed-loop
// clients (256-token prompts, 256 tokens out: 5x the engine's sequences)
// and one interactive client (8 tokens out, 100 ms think: about 0.4 of a
// sequence, 10% of the engine). Every run is repeated -rounds times, the
// runs of a round one after the other, so that each is measured side by
// side with the others under the same load; the summary compares the modes
// over the rounds of this run.
func priority() {
	const seqs, timeScale = 4, 1.0
	warm, measure := window(12*time.Second, 30*time.Second)
	header("Admission: an interactive stream under a bulk flood", fmt.Sprintf(`
One workersim (--max-num-seqs %d, --time-scale %v) behind one router replica, on 127.0.0.1, all
real processes. Bulk: 20 closed-loop streaming clients (256-token prompts, 256 tokens out,
x-priority: bulk), 5x the engine's sequences. Interactive: one closed-loop streaming client
(8 tokens out, 100 ms think, x-priority: interactive), about 10%% of the engine. TTFT is measured at
the client, to the first token event, and past the router's queue (less the x-admission-queue-ms
the router reported: what the engine and HTTP took); the first %v of each run are warm-up (the
router learns the engine's bound from its first scrape), the next %v are measured. "engine busy" is the engine's
running sequences over its %d, the mean of 250 ms samples; "idle while queued" is the share of
samples in which it ran fewer than %d while requests waited at the router. With --engine-priority --lend-reserved-slots
the router lends the interactive class's reserved slot to bulk, lets an interactive request go
over the engine's bound to take it back, and passes each request's class rank on as vLLM's
priority field; the workersim runs --scheduling-policy priority as vLLM's v1 scheduler does: its
queue goes by priority, and a waiting request never preempts a running one, so an interactive
request that finds the engine full waits, first in line, for a bulk request to end. "bulk time
before first token" is the share of a bulk request's time at the engine (its TTFT less its queue
time, over its whole time less its queue time) before its first token: the window in which the
router could take it back without cutting its client's stream. With --preempt-by-resume the
interactive request that takes its slot back has a bulk stream on the engine give way at its next
chunk (ended at the engine, queued first at the router, resumed where it stopped once admitted
again: its client sees a pause); "preempted by the router" counts them, "bulk failed" the bulk
streams that were not a whole 200 ending in [DONE]. %d rounds, each round every run once.`, seqs, timeScale, warm, measure, seqs, seqs, *rounds))
	fmt.Println("| round | run | interactive TTFT p50 ms | p99 ms | p99 / alone | p99 past the router's queue ms | interactive requests | bulk tokens/s | engine busy | engine waiting (mean) | queued at router (mean) | idle while queued | engine preemptions | preempted by the router | bulk failed | bulk time before first token |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	runs := selectedRuns()
	rows := make([][]priorityRow, len(runs))
	for round := 1; round <= *rounds; round++ {
		var alone time.Duration
		for i, r := range runs {
			row := priorityOnce(r, round, seqs, timeScale, warm, measure)
			if !r.flood {
				alone = row.p99
			}
			ratio := "-"
			if alone > 0 {
				row.ratio = float64(row.p99) / float64(alone)
				ratio = fmt.Sprintf("%.2f", row.ratio)
			}
			rows[i] = append(rows[i], row)
			fmt.Printf("| %d | %s | %s | %s | %s | %s | %d | %.0f | %.0f%% | %.2f | %.1f | %.0f%% | %.0f | %.0f | %d | %s |\n", round, r.name,
				ms(row.p50), ms(row.p99), ratio, ms(row.engineP99), row.requests, row.bulkTokens, 100*row.busy, row.waiting, row.queued,
				100*row.idle, row.preemptions, row.resumed, row.bulkFailed, row.beforeFirst)
			fmt.Fprintf(stderr, "priority %q round %d: load average %s at the start, %s at the end\n", r.name, round, row.loadStart, row.loadFinished)
			loads = append(loads, row.loadStart)
		}
	}
	fmt.Printf("\nLoad average (1, 5, 15 min) at the start of each run, in the table's order: %v.\n\n", loads)
	loads = nil
	prioritySummary(runs, rows)
	preemptionVerdict(runs, rows)
}

// preemptionVerdict says, round by round, whether preemption by resume
// held the interactive TTFT p99 to the kept-idle slot's and bulk's tokens
// to lending's, with no bulk stream failed.
func preemptionVerdict(runs []priorityRun, rows [][]priorityRow) {
	at := map[string]int{}
	for i, r := range runs {
		at[r.short] = i
	}
	idle, okIdle := at["idle"]
	lent, okLent := at["lent"]
	pre, okPre := at["preempt"]
	if !okIdle || !okLent || !okPre {
		return
	}
	met := 0
	for k := range rows[pre] {
		p, i, l := rows[pre][k], rows[idle][k], rows[lent][k]
		ok := p.p99 <= i.p99 && p.bulkTokens >= l.bulkTokens && p.bulkFailed == 0
		if ok {
			met++
		}
		fmt.Printf("Round %d: preemption's interactive TTFT p99 %s ms against kept idle %s ms, bulk %.0f tokens/s against lent %.0f, "+
			"%d bulk streams failed: %s.\n", k+1, ms(p.p99), ms(i.p99), p.bulkTokens, l.bulkTokens, p.bulkFailed, map[bool]string{true: "met", false: "not met"}[ok])
	}
	fmt.Printf("\nPreemption by resume met all three in %d of %d rounds. ", met, len(rows[pre]))
	fmt.Printf("The rounds' interactive requests pooled (%d and %d), TTFT p95 / p98 / p99: preemption %s / %s / %s ms, kept idle %s / %s / %s ms.\n\n",
		len(pooled(rows[pre])), len(pooled(rows[idle])), ms(pct(pooled(rows[pre]), 0.95)), ms(pct(pooled(rows[pre]), 0.98)),
		ms(pct(pooled(rows[pre]), 0.99)), ms(pct(pooled(rows[idle]), 0.95)), ms(pct(pooled(rows[idle]), 0.98)), ms(pct(pooled(rows[idle]), 0.99)))
}

// pooled is every round's interactive TTFTs of one run, together.
func pooled(rows []priorityRow) []time.Duration {
	var all []time.Duration
	for _, r := range rows {
		all = append(all, r.ttft...)
	}
	return all
}

// prioritySummary prints the before and after of this run: each mode over
// its rounds, worst and mean.
func prioritySummary(runs []priorityRun, rows [][]priorityRow) {
	fmt.Printf(`#### Before and after, side by side in this run

Each mode over the %d rounds above, worst and mean: "one class" is the door before priority classes,
"kept idle" the reserved slot before lending, "lent" the reserved slot lent to bulk. p99 / alone is
each round's p99 over the same round's alone p99.

`, *rounds)
	fmt.Println("| run | p99 / alone worst | mean | p99 ms worst | mean | bulk tokens/s worst | mean | idle while queued worst | mean |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	var both []string
	for i, r := range runs {
		var ratioW, ratioM, p99W, p99M, idleW, idleM, tokM float64
		tokW := -1.0
		for _, row := range rows[i] {
			p := float64(row.p99) / float64(time.Millisecond)
			ratioW, p99W, idleW = max(ratioW, row.ratio), max(p99W, p), max(idleW, row.idle)
			if tokW < 0 || row.bulkTokens < tokW {
				tokW = row.bulkTokens
			}
			n := float64(len(rows[i]))
			ratioM, p99M, idleM, tokM = ratioM+row.ratio/n, p99M+p/n, idleM+row.idle/n, tokM+row.bulkTokens/n
		}
		fmt.Printf("| %s | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f%% | %.0f%% |\n", r.name, ratioW, ratioM, p99W, p99M,
			tokW, tokM, 100*idleW, 100*idleM)
		if r.flood && ratioW <= 1.2 && idleW <= 0.05 {
			both = append(both, r.name)
		}
	}
	fmt.Println()
	if len(both) == 0 {
		both = []string{"none"}
	}
	fmt.Printf("Modes that met both targets in every round (p99 within 1.2x of alone, an idle slot in at most 5%% of the "+
		"samples while bulk waited): %s.\n\n", strings.Join(both, "; "))
}

// priorityOnce runs r once, in a fleet of its own.
func priorityOnce(r priorityRun, round, seqs int, timeScale float64, warm, measure time.Duration) priorityRow {
	f := newFleet()
	f.startWorkers(1, seqs, timeScale, r.workers...)
	f.startRouters(1, r.flags...)
	rec := &recorder{}
	target := func() string { return f.routers[0] }
	clients := []*client{{stream: "interactive", targets: target, headers: map[string]string{"x-priority": "interactive"},
		promptLen: 64, maxTokens: 8, think: 100 * time.Millisecond, rec: rec, seed: uint64(round)}}
	if r.flood {
		for i := range 20 {
			clients = append(clients, &client{stream: "bulk", targets: target, headers: map[string]string{"x-priority": "bulk"},
				promptLen: 1024, maxTokens: 256, rec: rec, seed: uint64(100*round + i)})
		}
	}
	row := priorityRow{loadStart: loadavg()}
	from := time.Now().Add(warm)
	preemptFrom := make(chan [2]float64, 1)
	preempted := func() [2]float64 {
		return [2]float64{gauge(f.workers[0], "vllm:num_preemptions_total"),
			gauge(f.routers[0], "vllm_router_preemptions_total", `result="resumed"`)}
	}
	go func() {
		time.Sleep(time.Until(from))
		preemptFrom <- preempted()
	}()
	_, from, to, es := drive(f, seqs, clients, warm, measure)
	before, after := <-preemptFrom, preempted()
	row.preemptions, row.resumed = after[0]-before[0], after[1]-before[1]
	checkCountsSettle(f)
	f.stop()
	row.loadFinished = loadavg()
	var ttft, past []time.Duration
	for _, s := range rec.between("interactive", from, to) {
		if s.arrived {
			ttft, past = append(ttft, s.ttft), append(past, s.ttft-s.queue)
		}
	}
	bulkTokens := 0
	var beforeFirst, atEngine time.Duration
	for _, s := range rec.between("bulk", from, to) {
		bulkTokens += s.tokens
		if s.failed {
			row.bulkFailed++
		}
		if s.arrived {
			beforeFirst += s.ttft - s.queue
			atEngine += s.dur - s.queue
		}
	}
	if len(es.running) > 0 {
		row.idle = float64(es.idleWhileQueued) / float64(len(es.running))
	}
	row.beforeFirst = "-"
	if atEngine > 0 {
		row.beforeFirst = fmt.Sprintf("%.1f%%", 100*float64(beforeFirst)/float64(atEngine))
	}
	row.p50, row.p99, row.engineP99, row.requests = pct(ttft, 0.5), pct(ttft, 0.99), pct(past, 0.99), len(ttft)
	row.ttft = ttft
	row.bulkTokens = float64(bulkTokens) / measure.Seconds()
	row.busy, row.waiting, row.queued = mean(es.running)/float64(seqs), mean(es.waiting), mean(es.queued)
	return row
}

// checkCountsSettle says on stderr when the router still counts requests in flight some
// seconds after every client's last request ended: a count that never came back (a leak), which
// would hold slots the engine has free.
func checkCountsSettle(f *fleet) {
	var held, running float64
	for range 50 {
		held = gauge(f.routers[0], "vllm_router_admission_in_flight")
		running = gauge(f.workers[0], "vllm:num_requests_running")
		if held == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(stderr, "the router counts %.0f requests in flight 5 s after the clients stopped (the engine runs %.0f): a count leaked\n", held, running)
}
