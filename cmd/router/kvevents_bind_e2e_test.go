package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/peers"
	"github.com/kvrouter/kvrouter/internal/tcpforward"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// These tests run the topology llm-d deploys: every engine dials the tier
// (vLLM given the router's address, --kv-events-bind) and reaches one
// replica, which relays what it hears to the others. The engines are
// llm-d-inference-sim, a public vLLM simulator that publishes by dialing
// out, and workersim with --kv-events-connect.

// bindTier starts len(binds) replicas, replica i binding its KV-event
// socket at binds[i], over the workers at urls (seeded by the first). It
// returns the processes and the arguments each was started with.
func bindTier(t *testing.T, routerBin string, binds []string, urls []string, extra ...string) ([]*process, [][]string) {
	t.Helper()
	n := len(binds)
	var procs []*process
	var argv [][]string
	// Every port is chosen here, so that a replica restarted with the same
	// arguments comes back at its addresses, as a restarted pod does.
	gossip := make([]string, n)
	for i := range gossip {
		gossip[i] = freeAddr(t)
	}
	for i := range n {
		args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", freeAddr(t),
			"--gossip-bind", gossip[i], "--data-dir", t.TempDir(), "--node-name", fmt.Sprintf("router-%d", i+1),
			"--bootstrap-expect", fmt.Sprint(n), "--retry-initial-backoff-ms", "1",
			// llm-d-inference-sim holds its events up to a second before it
			// publishes them: a stale window of 1 s would judge it silent.
			"--kv-events", "--kv-events-bind", "tcp://" + binds[i], "--kv-events-replay-offset", "-1",
			"--kv-events-stale-after", "3s", "--kv-events-tokenize-timeout", "2s"}
		if i > 0 {
			args = append(args, "--join", gossip[0])
		} else {
			args = append(args, "--worker-urls", strings.Join(urls, ","))
		}
		args = append(args, extra...)
		argv = append(argv, args)
		procs = append(procs, start(t, routerBin, args...))
	}
	return procs, argv
}

// routerURL waits for p to be ready and returns its URL.
func routerURL(t *testing.T, p *process) string {
	t.Helper()
	return "http://" + p.await(t, `router ready" addr=(\S+)`)
}

// kvRow is one worker's KV events on one replica (GET /cluster/workers).
type kvRow struct {
	State  string `json:"state"`
	Source string `json:"source"`
	Blocks int    `json:"blocks"`
	Next   uint64 `json:"next"`
	Epoch  uint32 `json:"epoch"`
	Lost   uint64 `json:"lost"`
	Resets uint64 `json:"rewinds"`
	Peer   uint64 `json:"peer_resets"`
}

// kvRows is every worker's KV events on router, by worker URL.
func kvRows(t *testing.T, router string) map[string]kvRow {
	t.Helper()
	rows, err := fetchKVRows(router)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// kvRowsOrNil is kvRows for a goroutine of the test's own: nil when the
// replica does not answer.
func kvRowsOrNil(router string) map[string]kvRow {
	rows, _ := fetchKVRows(router)
	return rows
}

func fetchKVRows(router string) (map[string]kvRow, error) {
	resp, err := http.Get(router + "/cluster/workers")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			URL string `json:"url"`
			KV  *kvRow `json:"kv_events"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	rows := map[string]kvRow{}
	for _, w := range body.Workers {
		if w.KV != nil {
			rows[w.URL] = *w.KV
		}
	}
	return rows, nil
}

func portString(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// engineTier is a tier of three replicas and three engines that dial it:
// two llm-d-inference-sims (model fake-model) and a workersim (sim-model),
// engine i dialing replica i, workersim's through lb.
type engineTier struct {
	routerBin, workersim string
	routers              []string
	procs                []*process
	argv                 [][]string
	engines              []string // the engines' URLs, workersim's last
	lbTo                 func(addr string)
	lbAddr               string
	binds                []string
	ws                   *process // workersim
	replay               string   // workersim's replay socket
}

func startEngineTier(t *testing.T) engineTier {
	t.Helper()
	routerBin, workersim := binaries(t)
	peers.Sim(t)
	binds := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	engines := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	var urls []string
	for _, e := range engines {
		urls = append(urls, "http://"+e)
	}
	// The simulators are seeded; workersim, whose engine keeps a replay
	// socket, is added through the admin API with it and its topic.
	procs, argv := bindTier(t, routerBin, binds, urls[:2])
	var routers []string
	for _, p := range procs {
		routers = append(routers, routerURL(t, p))
	}
	replay := freeAddr(t)
	add := fmt.Sprintf(`{"url":%q,"kv_events_replay_endpoint":"tcp://%s","kv_events_topic":"kv@%s@sim-model"}`, urls[2], replay, engines[2])
	testwait.EventuallyNil(t, tierFormDeadline, func() error { // the tier's first election may be under way
		if status, _, body := call(t, http.MethodPost, routers[0]+"/workers", add); status != http.StatusCreated {
			return fmt.Errorf("adding workersim: %d %s", status, body)
		}
		return nil
	}, "workersim added")
	for _, r := range routers {
		testwait.EventuallyNil(t, tierFormDeadline, func() error {
			if n := len(kvRows(t, r)); n != len(engines) {
				return fmt.Errorf("%d of %d workers", n, len(engines))
			}
			return nil
		}, "every worker registered on %s", r)
	}
	for i, e := range engines[:2] {
		startPeerSimAt(t, e, []string{"POD_IP=" + e}, "fake-model", "--enable-kvcache", "--kv-cache-size", "512",
			"--block-size", "16", "--zmq-endpoint", "tcp://"+binds[i])
	}
	lb := tcpforward.New(t, binds[2])
	ws := startDialingWorkersim(t, workersim, engines[2], lb.Addr(), replay)
	for _, r := range routers {
		testwait.EventuallyNil(t, time.Minute, func() error {
			if err := servesModels(r, "fake-model", "sim-model"); err != nil {
				return err
			}
			return allHealthy(r, len(urls))
		}, "%s knows which engine serves which model, every one healthy", r)
	}
	return engineTier{routerBin: routerBin, workersim: workersim, routers: routers, procs: procs, argv: argv,
		engines: urls, lbTo: lb.To, lbAddr: lb.Addr(), binds: binds, ws: ws, replay: replay}
}

// startDialingWorkersim starts workersim on addr, serving sim-model,
// dialing its KV events to to and keeping its batches for replay at
// replay.
func startDialingWorkersim(t *testing.T, bin, addr, to, replay string) *process {
	t.Helper()
	ws := start(t, bin, "--port", portString(t, addr), "--worker-id", "w3", "--time-scale", "50",
		"--kv-capacity-tokens", "4096", "--kv-events-endpoint", "tcp://"+to, "--kv-events-connect",
		"--kv-events-topic", "kv@"+addr+"@sim-model", "--kv-events-replay-endpoint", "tcp://"+replay)
	ws.await(t, `^listening on (\S+)`)
	return ws
}

// engineModels are the models of et.engines, in order.
var engineModels = []string{"fake-model", "fake-model", "sim-model"}

// traffic sends a new prompt per model through each replica, and one
// straight to each engine (traffic that does not pass the router, which
// the engines' events tell the tier of all the same).
func (et engineTier) traffic(t *testing.T, round int) {
	t.Helper()
	for i, r := range et.routers {
		for _, model := range []string{"fake-model", "sim-model"} {
			if c := completeModel(t, r, model, roundPrompt(round, fmt.Sprint("replica ", i), model)); c.status != http.StatusOK {
				t.Fatalf("%s through replica %d: status %d: %s", model, i+1, c.status, c.body)
			}
		}
	}
	for i, e := range et.engines {
		if c := completeModel(t, e, engineModels[i], roundPrompt(round, e, engineModels[i])); c.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", e, c.status, c.body)
		}
	}
}

// roundPrompt is the prompt traffic sends to (through) to for model in a
// round.
func roundPrompt(round int, to, model string) string {
	return strings.Repeat(fmt.Sprintf("round %d to %s, a conversation with %s. ", round, to, model), 8)
}

// TestEndToEndEnginesThatDialOneReplicaAreKnownToTheWholeTier: each engine
// publishes to one replica; every replica holds every engine's blocks,
// trusts them, and routes on them.
func TestEndToEndEnginesThatDialOneReplicaAreKnownToTheWholeTier(t *testing.T) {
	et := startEngineTier(t)
	round := 0
	testwait.EventuallyNil(t, time.Minute, func() error {
		round++
		et.traffic(t, round)
		return et.agree(t)
	}, "every replica holds every engine's set, trusted")
	// A prompt an engine got straight, once a replica heard of it,
	// continued through that replica (a replica of its own for each
	// engine: a prompt one replica routed, its peers would know from it):
	// the index knows nothing of the prompt and the events do, so the
	// replica decides the continuation where it arrives, on the events,
	// where a prompt nobody knows would be put to the placer.
	const onEvents = `vllm_router_kv_matched_candidates{on="events"}`
	cold := func(r string) float64 {
		return metric(t, r, `vllm_router_cluster_placements_total{how="asked"}`) +
			metric(t, r, `vllm_router_cluster_placements_total{how="alone"}`)
	}
	for i, r := range et.routers {
		e, model := et.engines[i], engineModels[i]
		testwait.EventuallyNil(t, 30*time.Second, func() error {
			round++
			heard := kvRows(t, r)[e].Next
			if c := completeModel(t, e, model, roundPrompt(round, e, model)); c.status != http.StatusOK {
				t.Fatalf("%s: status %d: %s", e, c.status, c.body)
			}
			testwait.EventuallyNil(t, 10*time.Second, func() error {
				if kvRows(t, r)[e].Next == heard {
					return errors.New("no batch since the prompt")
				}
				return nil
			}, "replica %d hears %s's batch", i+1, e)
			matched, asked := metric(t, r, onEvents), cold(r)
			if c := completeModel(t, r, model, roundPrompt(round, e, model)+" And the next turn?"); c.status != http.StatusOK {
				t.Fatalf("through replica %d: status %d: %s", i+1, c.status, c.body)
			}
			if cold(r) != asked || metric(t, r, onEvents) == matched {
				return fmt.Errorf("replica %d put the continuation of what %s holds to the placer", i+1, e)
			}
			return nil
		}, "replica %d decides on the events a continuation of what %s holds", i+1, e)
	}
}

// agree says whether every replica holds the same trusted set of each
// engine, heard by exactly one (bind) and relayed to the others (peer).
func (et engineTier) agree(t *testing.T) error {
	t.Helper()
	all := make([]map[string]kvRow, len(et.routers))
	for i, r := range et.routers {
		all[i] = kvRows(t, r)
	}
	for _, e := range et.engines {
		bound := 0
		for i, rows := range all {
			row := rows[e]
			if row.State != "trusted" || row.Blocks == 0 {
				return fmt.Errorf("replica %d: %s is %s with %d blocks", i+1, e, row.State, row.Blocks)
			}
			if row.Blocks != all[0][e].Blocks || row.Next != all[0][e].Next {
				return fmt.Errorf("%s: replica %d holds %d blocks at %d, replica 1 %d at %d", e, i+1, row.Blocks, row.Next,
					all[0][e].Blocks, all[0][e].Next)
			}
			if row.Source == "bind" {
				bound++
			} else if row.Source != "peer" {
				return fmt.Errorf("replica %d hears %s from %q", i+1, e, row.Source)
			}
		}
		if bound != 1 {
			return fmt.Errorf("%s is heard by %d replicas", e, bound)
		}
	}
	return nil
}

// completeModel is complete for another model than the default one.
func completeModel(t *testing.T, url, model, prompt string) completion {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 4})
	return postCompletion(t, url, body)
}

// servesModels says whether router's /v1/models lists every one of models.
func servesModels(router string, models ...string) error {
	resp, err := http.Get(router + "/v1/models")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return err
	}
	have := map[string]bool{}
	for _, m := range list.Data {
		have[m.ID] = true
	}
	for _, m := range models {
		if !have[m] {
			return fmt.Errorf("%s is not listed", m)
		}
	}
	return nil
}

// TestEndToEndATiersViewOfTheEnginesSurvivesRestartsAndTheHearersDeath
// measures, on real processes, the three events a tier on bound events
// lives through: an engine restarted (every replica must empty its set of
// it, within 1 s of its first batch), a replica restarted (it must know
// every worker's set within 5 s of ready, from its peers), and the death of
// the replica an engine publishes to (no replica may distrust the worker
// for longer than the engine takes to reconnect).
func TestEndToEndATiersViewOfTheEnginesSurvivesRestartsAndTheHearersDeath(t *testing.T) {
	et := startEngineTier(t)
	round := 0
	traffic := func() { round++; et.traffic(t, round) }
	testwait.EventuallyNil(t, time.Minute, func() error { traffic(); return et.agree(t) }, "the tier agrees")
	wsURL := et.engines[2]

	// An engine restarted: its sequence starts over, which the replica it
	// reaches takes for a restart and relays as a fresh start.
	before := et.resets(t, wsURL)
	et.ws.kill()
	et.ws = startDialingWorkersim(t, et.workersim, strings.TrimPrefix(wsURL, "http://"), et.lbAddr, et.replay)
	published := time.Now()
	if c := completeModel(t, wsURL, "sim-model", "the restarted engine's first prompt, "+strings.Repeat("word ", 80)); c.status != http.StatusOK {
		t.Fatalf("status %d", c.status)
	}
	testwait.EventuallyNil(t, 10*time.Second, func() error {
		for i, n := range et.resets(t, wsURL) {
			if n <= before[i] {
				return fmt.Errorf("replica %d has not emptied its set", i+1)
			}
		}
		return nil
	}, "every replica emptying the restarted engine's set")
	emptied := time.Since(published)
	t.Logf("an engine restarted: every replica emptied its set %v after its first batch was asked for", emptied.Round(time.Millisecond))
	if emptied > time.Second {
		t.Errorf("the restarted engine's set emptied everywhere after %v, over 1 s", emptied)
	}

	// A replica restarted: from its peers' snapshots, before any batch of
	// its own. It is replica 3, which workersim's engine dials (through
	// its load balancer): llm-d-inference-sim's publisher (go-zeromq) does
	// not come back once the replica it dialed went away.
	testwait.EventuallyNil(t, time.Minute, func() error { traffic(); return et.agree(t) }, "the tier agrees again")
	et.procs[2].kill()
	et.procs[2] = start(t, et.routerBin, et.argv[2]...)
	et.routers[2] = routerURL(t, et.procs[2])
	ready := time.Now()
	testwait.EventuallyNil(t, 30*time.Second, et.knows(t, 2), "the restarted replica knowing every worker's set")
	known := time.Since(ready)
	// The engine it heard comes back to it with its next batch.
	testwait.EventuallyNil(t, time.Minute, func() error { traffic(); return et.agree(t) }, "the tier agrees again")
	t.Logf("a replica restarted: every worker's set known %v after it was ready", known.Round(time.Millisecond))
	if known > 5*time.Second {
		t.Errorf("the restarted replica knew every set %v after ready, over 5 s", known)
	}

	// The hearer of workersim's engine dies; its load balancer sends the
	// engine to replica 1. Replicas 1 and 2 are watched meanwhile.
	testwait.EventuallyNil(t, time.Minute, func() error { traffic(); return et.agree(t) }, "the tier agrees again")
	watch := et.watchTrust(t, wsURL, 0, 1)
	busy := et.keepBusy(wsURL) // batches in flight when the hearer dies: the replay's to fill
	et.procs[2].kill()
	et.lbTo(et.binds[0])
	busy()
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		if c := completeModel(t, wsURL, "sim-model", fmt.Sprintf("after the hearer died, %d ", time.Now().UnixNano())+strings.Repeat("word ", 60)); c.status != http.StatusOK {
			return fmt.Errorf("status %d", c.status)
		}
		if row := kvRows(t, et.routers[0])[wsURL]; row.Source != "bind" || row.State != "trusted" {
			return fmt.Errorf("replica 1 hears it from %q, %s", row.Source, row.State)
		}
		return nil
	}, "replica 1 hearing the engine itself")
	longest := watch()
	t.Logf("the hearer killed: the longest time a surviving replica did not trust the engine's set: %v", longest.Round(time.Millisecond))
	if row := kvRows(t, et.routers[0])[wsURL]; row.Lost+row.Resets != 0 {
		t.Errorf("replica 1 emptied the set when the engine came to it: %+v", row)
	}
	if longest > 2*time.Second {
		t.Errorf("a surviving replica distrusted the engine's set for %v", longest)
	}
}

// resets is each replica's count of the times worker's set was emptied.
func (et engineTier) resets(t *testing.T, worker string) []uint64 {
	t.Helper()
	var out []uint64
	for _, r := range et.routers {
		row := kvRows(t, r)[worker]
		out = append(out, row.Lost+row.Resets+row.Peer)
	}
	return out
}

// knows says whether replica i holds every worker's set as a peer does
// (an engine whose connection went with the replica is not trusted until
// it publishes again: an idle connection names no worker).
func (et engineTier) knows(t *testing.T, i int) func() error {
	return func() error {
		other := et.routers[(i+1)%len(et.routers)]
		want, got := kvRows(t, other), kvRows(t, et.routers[i])
		for _, e := range et.engines {
			if got[e].Blocks != want[e].Blocks || got[e].Next != want[e].Next || got[e].Blocks == 0 {
				return fmt.Errorf("%s: %d blocks at %d, a peer %d at %d", e, got[e].Blocks, got[e].Next, want[e].Blocks, want[e].Next)
			}
		}
		return nil
	}
}

// watchTrust polls worker's state on replicas is every 10 ms until the
// returned func is called, which says the longest span any of them did not
// trust it.
func (et engineTier) watchTrust(t *testing.T, worker string, is ...int) func() time.Duration {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan time.Duration)
	go func() {
		var longest time.Duration
		since := map[int]time.Time{}
		for {
			select {
			case <-stop:
				done <- longest
				return
			case <-time.After(10 * time.Millisecond):
			}
			now := time.Now()
			for _, i := range is {
				if state := kvRowsOrNil(et.routers[i])[worker].State; state == "trusted" {
					delete(since, i)
				} else if _, ok := since[i]; !ok {
					since[i] = now
				}
				if s, ok := since[i]; ok && now.Sub(s) > longest {
					longest = now.Sub(s)
				}
			}
		}
	}()
	return func() time.Duration { close(stop); return <-done }
}

// keepBusy sends workersim at url a stream of new prompts, straight, until
// the returned func is called (which waits for the last).
func (et engineTier) keepBusy(url string) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body, _ := json.Marshal(map[string]any{"model": "sim-model", "max_tokens": 1,
				"prompt": fmt.Sprintf("busy %d %d ", i, time.Now().UnixNano()) + strings.Repeat("word ", 40)})
			if resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body))); err == nil {
				resp.Body.Close()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// allHealthy says whether router holds n workers, every one healthy.
func allHealthy(router string, n int) error {
	resp, err := http.Get(router + "/cluster/workers")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			URL     string `json:"url"`
			Healthy bool   `json:"healthy"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if len(body.Workers) != n {
		return fmt.Errorf("%d of %d workers", len(body.Workers), n)
	}
	for _, w := range body.Workers {
		if !w.Healthy {
			return fmt.Errorf("%s is not healthy yet", w.URL)
		}
	}
	return nil
}
