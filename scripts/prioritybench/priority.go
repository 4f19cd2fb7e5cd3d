package main

import (
	"fmt"
	"time"
)

// priority: one engine of 4 sequences; a bulk flood of 20 closed-loop
// clients (256-token prompts, 256 tokens out: 5x the engine's sequences)
// and one interactive client (8 tokens out, 100 ms think: about 0.4 of a
// sequence, 10% of the engine). Every run is repeated -rounds times, the
// runs of a round one after the other, so that each is measured side by
// side with the others under the same load.
func priority() {
	const seqs, timeScale = 4, 1.0
	warm, measure := window(12*time.Second, 30*time.Second)
	type run struct {
		name    string
		flags   []string
		workers []string
		flood   bool
	}
	reserved := []string{"--priority-reserved", "interactive=1"}
	runs := []run{
		{"interactive alone", reserved, nil, false},
		{"+ bulk flood, one class (FIFO, no saturation signal)", []string{"--priority-classes", "", "--engine-scrape-interval-secs", "0"}, nil, true},
		{"+ bulk flood, interactive=1 reserved, bulk may not take it", reserved, nil, true},
		{"+ bulk flood, interactive=1 reserved and lent to bulk, taken back by engine preemption (--engine-priority)",
			append([]string{"--engine-priority"}, reserved...), []string{"--scheduling-policy", "priority"}, true},
	}
	header("Admission: an interactive stream under a bulk flood", fmt.Sprintf(`
One workersim (--max-num-seqs %d, --time-scale %v) behind one router replica, on 127.0.0.1, all
real processes. Bulk: 20 closed-loop streaming clients (256-token prompts, 256 tokens out,
x-priority: bulk), 5x the engine's sequences. Interactive: one closed-loop streaming client
(8 tokens out, 100 ms think, x-priority: interactive), about 10%% of the engine. TTFT is measured at
the client, to the first token event; the first %v of each run are warm-up (the router learns the
engine's bound from its first scrape), the next %v are measured. "engine busy" is the engine's
running sequences over its %d, the mean of 250 ms samples; "idle while queued" is the share of
samples in which it ran fewer than %d while requests waited at the router. With --engine-priority
the router lends the interactive class's reserved slot to bulk and passes each request's class rank
on as vLLM's priority field; the workersim runs --scheduling-policy priority, so an interactive
request that finds the engine full preempts a bulk one, which resumes after it. "preempt before
first token" is the share of a bulk request's time at the engine (its TTFT less its queue time,
over its whole time less its queue time) before its first token: the window in which the router
could preempt it itself, invisibly to its client (option b). %d rounds, each round every run once.`,
		seqs, timeScale, warm, measure, seqs, seqs, *rounds))
	fmt.Println("| round | run | interactive TTFT p50 ms | p99 ms | p99 / alone | interactive requests | bulk tokens/s | engine busy | engine waiting (mean) | queued at router (mean) | idle while queued | engine preemptions | preempt before first token |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for round := 1; round <= *rounds; round++ {
		var alone time.Duration
		for _, r := range runs {
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
			load := loadavg()
			start := time.Now()
			from := start.Add(warm)
			preemptFrom := make(chan float64, 1)
			go func() {
				time.Sleep(time.Until(from))
				preemptFrom <- gauge(f.workers[0], "vllm:num_preemptions_total")
			}()
			_, from, to, es := drive(f, seqs, clients, warm, measure)
			preemptions := gauge(f.workers[0], "vllm:num_preemptions_total") - <-preemptFrom
			f.stop()
			var ttft []time.Duration
			for _, s := range rec.between("interactive", from, to) {
				if s.arrived {
					ttft = append(ttft, s.ttft)
				}
			}
			bulkTokens := 0
			var beforeFirst, atEngine time.Duration
			for _, s := range rec.between("bulk", from, to) {
				bulkTokens += s.tokens
				if s.arrived {
					beforeFirst += s.ttft - s.queue
					atEngine += s.dur - s.queue
				}
			}
			idle := 0.0
			if len(es.running) > 0 {
				idle = float64(es.idleWhileQueued) / float64(len(es.running))
			}
			p99 := pct(ttft, 0.99)
			if !r.flood {
				alone = p99
			}
			ratio, window := "-", "-"
			if alone > 0 {
				ratio = fmt.Sprintf("%.2f", float64(p99)/float64(alone))
			}
			if atEngine > 0 {
				window = fmt.Sprintf("%.1f%%", 100*float64(beforeFirst)/float64(atEngine))
			}
			fmt.Printf("| %d | %s | %s | %s | %s | %d | %.0f | %.0f%% | %.2f | %.1f | %.0f%% | %.0f | %s |\n", round, r.name,
				ms(pct(ttft, 0.5)), ms(p99), ratio, len(ttft), float64(bulkTokens)/measure.Seconds(),
				100*mean(es.running)/seqs, mean(es.waiting), mean(es.queued), 100*idle, preemptions, window)
			fmt.Fprintf(stderr, "priority %q round %d: load average %s at the start, %s at the end\n", r.name, round, load, loadavg())
			loads = append(loads, load)
		}
	}
	fmt.Printf("\nLoad average (1, 5, 15 min) at the start of each run, in the table's order: %v.\n\n", loads)
	loads = nil
}
