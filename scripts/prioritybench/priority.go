package main

import (
	"fmt"
	"time"
)

// priority: one engine of 4 sequences; a bulk flood of 20 closed-loop
// clients (256-token prompts, 256 tokens out: 5x the engine's sequences)
// and one interactive client (8 tokens out, 100 ms think: about 0.4 of a
// sequence, 10% of the engine).
func priority() {
	const seqs, timeScale = 4, 1.0
	warm, measure := window(12*time.Second, 30*time.Second)
	type run struct {
		name  string
		flags []string
		flood bool
	}
	runs := []run{
		{"interactive alone", []string{"--priority-reserved", "interactive=1"}, false},
		{"+ bulk flood, one class (as before: FIFO, no saturation signal)", []string{"--priority-classes", "", "--engine-scrape-interval-secs", "0"}, true},
		{"+ bulk flood, classes and the saturation signal, interactive=1 reserved", []string{"--priority-reserved", "interactive=1"}, true},
	}
	header("Admission: an interactive stream under a bulk flood", fmt.Sprintf(`
One workersim (--max-num-seqs %d, --time-scale %v) behind one router replica, on 127.0.0.1, all
real processes. Bulk: 20 closed-loop streaming clients (256-token prompts, 256 tokens out,
x-priority: bulk), 5x the engine's sequences. Interactive: one closed-loop streaming client
(8 tokens out, 100 ms think, x-priority: interactive), about 10%% of the engine. TTFT is measured at
the client, to the first token event; the first %v of each run are warm-up (the router learns the
engine's bound from its first scrape), the next %v are measured. "idle while queued" is the share of
250 ms samples in which the engine ran fewer than %d sequences while requests waited at the router.
The router has no preemption: the interactive class gets one reserved slot (--priority-reserved
interactive=1), which bulk may not take, so bulk runs on the other three.`, seqs, timeScale, warm, measure, seqs))
	fmt.Println("| run | interactive TTFT p50 ms | p99 ms | interactive requests | bulk tokens/s | engine running (mean) | engine waiting (mean) | queued at router (mean) | idle while queued |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		f := newFleet()
		f.startWorkers(1, seqs, timeScale)
		f.startRouters(1, r.flags...)
		rec := &recorder{}
		target := func() string { return f.routers[0] }
		clients := []*client{{stream: "interactive", targets: target, headers: map[string]string{"x-priority": "interactive"},
			promptLen: 64, maxTokens: 8, think: 100 * time.Millisecond, rec: rec, seed: 1}}
		if r.flood {
			for i := range 20 {
				clients = append(clients, &client{stream: "bulk", targets: target, headers: map[string]string{"x-priority": "bulk"},
					promptLen: 1024, maxTokens: 256, rec: rec, seed: uint64(100 + i)})
			}
		}
		load := loadavg()
		_, from, to, es := drive(f, seqs, clients, warm, measure)
		f.stop()
		var ttft []time.Duration
		for _, s := range rec.between("interactive", from, to) {
			if s.arrived {
				ttft = append(ttft, s.ttft)
			}
		}
		bulkTokens := 0
		for _, s := range rec.between("bulk", from, to) {
			bulkTokens += s.tokens
		}
		idle := 0.0
		if len(es.running) > 0 {
			idle = float64(es.idleWhileQueued) / float64(len(es.running))
		}
		fmt.Printf("| %s | %s | %s | %d | %.0f | %.2f | %.2f | %.1f | %.0f%% |\n", r.name, ms(pct(ttft, 0.5)), ms(pct(ttft, 0.99)),
			len(ttft), float64(bulkTokens)/measure.Seconds(), mean(es.running), mean(es.waiting), mean(es.queued), 100*idle)
		fmt.Fprintf(stderr, "priority %q: load average %s at the start, %s at the end\n", r.name, load, loadavg())
		loads = append(loads, load)
	}
	fmt.Printf("\nLoad average (1, 5, 15 min) at the start of each run: %v.\n\n", loads)
	loads = nil
}
