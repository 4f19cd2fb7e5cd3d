package main

import (
	"encoding/json"
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
// socket at binds[i], over the workers at urls (seeded by the first).
func bindTier(t *testing.T, routerBin string, binds []string, urls []string, extra ...string) []*process {
	t.Helper()
	n := len(binds)
	gossip := tierGossipBinds(t, n)
	var procs []*process
	for i := range n {
		args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
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
		procs = append(procs, start(t, routerBin, append(args, extra...)...))
	}
	return procs
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
	resp, err := http.Get(router + "/cluster/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			URL string `json:"url"`
			KV  *kvRow `json:"kv_events"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	rows := map[string]kvRow{}
	for _, w := range body.Workers {
		if w.KV != nil {
			rows[w.URL] = *w.KV
		}
	}
	return rows
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
	routers []string
	procs   []*process
	engines []string // the engines' URLs, workersim's last
	lbTo    func(addr string)
	binds   []string
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
	procs := bindTier(t, routerBin, binds, urls)
	var routers []string
	for _, p := range procs {
		routers = append(routers, routerURL(t, p))
	}
	for i, e := range engines[:2] {
		startPeerSimAt(t, e, []string{"POD_IP=" + e}, "fake-model", "--enable-kvcache", "--kv-cache-size", "512",
			"--block-size", "16", "--zmq-endpoint", "tcp://"+binds[i])
	}
	lb := tcpforward.New(t, binds[2])
	ws := start(t, workersim, "--port", portString(t, engines[2]), "--worker-id", "w3", "--time-scale", "50",
		"--kv-capacity-tokens", "4096", "--kv-events-endpoint", "tcp://"+lb.Addr(), "--kv-events-connect",
		"--kv-events-topic", "kv@"+engines[2]+"@sim-model")
	ws.await(t, `^listening on (\S+)`)
	for _, r := range routers {
		testwait.EventuallyNil(t, time.Minute, func() error { return servesModels(r, "fake-model", "sim-model") },
			"%s knows which engine serves which model", r)
	}
	return engineTier{routers: routers, procs: procs, engines: urls, lbTo: lb.To, binds: binds}
}

// engineModels are the models of et.engines, in order.
var engineModels = []string{"fake-model", "fake-model", "sim-model"}

// traffic sends a new prompt per model through each replica, and one
// straight to each engine (traffic that does not pass the router, which
// the engines' events tell the tier of all the same).
func (et engineTier) traffic(t *testing.T, round int) {
	t.Helper()
	prompt := func(to, model string) string {
		return strings.Repeat(fmt.Sprintf("round %d to %s, a conversation with %s. ", round, to, model), 8)
	}
	for i, r := range et.routers {
		for _, model := range []string{"fake-model", "sim-model"} {
			if c := completeModel(t, r, model, prompt(fmt.Sprint("replica ", i), model)); c.status != http.StatusOK {
				t.Fatalf("%s through replica %d: status %d: %s", model, i+1, c.status, c.body)
			}
		}
	}
	for i, e := range et.engines {
		if c := completeModel(t, e, engineModels[i], prompt(e, engineModels[i])); c.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", e, c.status, c.body)
		}
	}
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
	for i, r := range et.routers {
		if on := metric(t, r, `vllm_router_kv_matched_candidates{on="events"}`); on == 0 {
			t.Errorf("replica %d matched no candidate on the events", i+1)
		}
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
