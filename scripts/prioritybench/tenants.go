package main

import (
	"fmt"
	"time"
)

// tenants: four workersims of 4 sequences (16 in all) behind a tier of
// four replicas; tenant heavy has 120 closed-loop clients, light 12, so
// both want more than half the engines and each one's fair share is half
// the tokens served.
func tenants() {
	const workers, seqs, timeScale = 4, 4, 0.25
	const light, heavy = 12, 120
	warm, measure := window(20*time.Second, 60*time.Second)
	type run struct {
		name   string
		pinned bool
		flags  []string
	}
	runs := []run{
		{"random balancer, tier-wide view", false, nil},
		{"random balancer, each replica alone (--disable-tier-fairness)", false, []string{"--disable-tier-fairness"}},
		{"heavy pinned to one replica, tier-wide view", true, nil},
		{"heavy pinned to one replica, each replica alone (--disable-tier-fairness)", true, []string{"--disable-tier-fairness"}},
	}
	header("Admission: two tenants, one with 10x the other's clients, through a tier of four", fmt.Sprintf(`
%d workersims (--max-num-seqs %d, --time-scale %v: %d sequences in all) behind four router replicas
that form one cluster (real memberlist and Raft), all on 127.0.0.1. Tenant "light" runs %d
closed-loop streaming clients, tenant "heavy" %d (x-tenant names them; --tenant-header x-tenant),
all in the default class, 256-token prompts and 64 tokens out. Each wants more than half the
engines, so each one's fair share is half of the tokens served. Either every request goes to a
replica drawn at random, or heavy's all go to the first replica (light's still at random). The
first %v are warm-up (the replicas learn the engines' bounds; what the engines queued before that
drains), then tokens are counted for %v. "share" is a tenant's tokens over its fair share.`,
		workers, seqs, timeScale, workers*seqs, light, heavy, warm, measure))
	fmt.Println("| run | light tokens | heavy tokens | light share | heavy share | engines running (mean of 16) | engines waiting (mean) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range runs {
		f := newFleet()
		f.startWorkers(workers, seqs, timeScale)
		f.startRouters(4, append([]string{"--tenant-header", "x-tenant"}, r.flags...)...)
		rec := &recorder{}
		var clients []*client
		for i := range light + heavy {
			name, target := "light", randomTarget(f, uint64(i))
			if i >= light {
				name = "heavy"
				if r.pinned {
					target = func() string { return f.routers[0] }
				}
			}
			clients = append(clients, &client{stream: name, targets: target, headers: map[string]string{"x-tenant": name},
				promptLen: 1024, maxTokens: 64, rec: rec, seed: uint64(1000 + i)})
		}
		load := loadavg()
		_, from, to, es := drive(f, workers*seqs, clients, warm, measure)
		f.stop()
		tok := map[string]int{}
		for _, name := range []string{"light", "heavy"} {
			for _, s := range rec.between(name, from, to) {
				tok[name] += s.tokens
			}
		}
		fair := float64(tok["light"]+tok["heavy"]) / 2
		fmt.Printf("| %s | %d | %d | %.2f | %.2f | %.1f | %.1f |\n", r.name, tok["light"], tok["heavy"],
			float64(tok["light"])/fair, float64(tok["heavy"])/fair, mean(es.running), mean(es.waiting))
		fmt.Fprintf(stderr, "tenants %q: load average %s at the start, %s at the end\n", r.name, load, loadavg())
		loads = append(loads, load)
	}
	fmt.Printf("\nLoad average (1, 5, 15 min) at the start of each run: %v.\n\n", loads)
	loads = nil
}
