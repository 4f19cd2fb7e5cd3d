package main

import (
	"fmt"
	"time"
)

// saturation: two workersims of 4 sequences, one replica, 32 closed-loop
// clients (4x the engines' sequences).
func saturation() {
	const workers, seqs, timeScale, clientsN = 2, 4, 0.25, 32
	warm, measure := window(15*time.Second, 30*time.Second)
	type run struct {
		name  string
		flags []string
	}
	runs := []run{
		{"saturation signal off (--engine-scrape-interval-secs 0)", []string{"--engine-scrape-interval-secs", "0"}},
		{"saturation signal on (default)", nil},
	}
	header("Admission: the saturation signal", fmt.Sprintf(`
%d workersims (--max-num-seqs %d, --time-scale %v) behind one router replica, on 127.0.0.1; %d
closed-loop streaming clients (256-token prompts, 64 tokens out), 4x the engines' sequences. With the
signal on, the replica reads the busy engines' /metrics every second (the health monitor's scrape),
learns each engine's bound when it reports requests waiting, and holds what exceeds the bounds in
its own queue. "after admission" is the client's TTFT less the x-admission-queue-ms the router
reported: what the engine made the request wait. The first %v are warm-up, the next %v measured.`,
		workers, seqs, timeScale, clientsN, warm, measure))
	fmt.Println("| run | engines waiting (mean) | (max) | queued at router (mean) | TTFT p50 ms | p99 ms | TTFT after admission p50 ms | p99 ms | tokens/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		f := newFleet()
		f.startWorkers(workers, seqs, timeScale)
		f.startRouters(1, r.flags...)
		rec := &recorder{}
		var clients []*client
		for i := range clientsN {
			clients = append(clients, &client{stream: "c", targets: func() string { return f.routers[0] },
				promptLen: 1024, maxTokens: 64, rec: rec, seed: uint64(500 + i)})
		}
		load := loadavg()
		_, from, to, es := drive(f, workers*seqs, clients, warm, measure)
		f.stop()
		var ttft, after []time.Duration
		tokens := 0
		for _, s := range rec.between("c", from, to) {
			tokens += s.tokens
			if s.arrived {
				ttft = append(ttft, s.ttft)
				after = append(after, s.ttft-s.queue)
			}
		}
		fmt.Printf("| %s | %.2f | %.0f | %.1f | %s | %s | %s | %s | %.0f |\n", r.name, mean(es.waiting), maxOf(es.waiting), mean(es.queued),
			ms(pct(ttft, 0.5)), ms(pct(ttft, 0.99)), ms(pct(after, 0.5)), ms(pct(after, 0.99)), float64(tokens)/measure.Seconds())
		fmt.Fprintf(stderr, "saturation %q: load average %s at the start, %s at the end\n", r.name, load, loadavg())
		loads = append(loads, load)
	}
	fmt.Printf("\nLoad average (1, 5, 15 min) at the start of each run: %v.\n\n", loads)
	loads = nil
}
