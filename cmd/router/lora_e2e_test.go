package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// LoRA adapters through real processes: llm-d-inference-sim serving
// adapters (its --max-loras slots; a request of another adapter waits), and
// workersim for the cache identity (cached_tokens honest under a salt).

const loraBase = "lora-base"

// loraModules is --lora-modules for adapters a0..a(n-1).
func loraModules(n int) []string {
	args := []string{"--lora-modules"}
	for i := range n {
		args = append(args, fmt.Sprintf(`{"name":"a%d","path":"/adapters/a%d"}`, i, i))
	}
	return args
}

// startLoRASims starts n llm-d-inference-sims serving loraBase and adapters
// a0..a(adapters-1) with one slot each; extra are more of their flags.
func startLoRASims(t *testing.T, n, adapters int, extra ...string) []string {
	t.Helper()
	var urls []string
	for range n {
		args := append(append([]string{"--max-loras", "1", "--max-cpu-loras", "64"}, extra...), loraModules(adapters)...)
		urls = append(urls, startPeerSim(t, loraBase, args...))
	}
	return urls
}

// adapterPost sends a short completion of model through router and returns
// its status.
func adapterPost(t *testing.T, router, model, prompt string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 4})
	resp, err := http.Post(router+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// processed is the router's count of answered attempts per worker URL.
func processed(t *testing.T, router string, workers []string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, w := range workers {
		out[w] = metric(t, router, fmt.Sprintf("vllm_router_processed_requests_total{worker=%q}", w))
	}
	return out
}

// movedTo is the workers whose count grew from before to after.
func movedTo(before, after map[string]float64) []string {
	var out []string
	for w, n := range after {
		if n > before[w] {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// adaptersKnown waits until router routes every adapter a0..a(n-1).
func adaptersKnown(t *testing.T, router string, n int) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, func() bool {
		return adapterPost(t, router, fmt.Sprintf("a%d", n-1), "warm up") == 200
	}, "the adapters known to %s", router)
}

func TestEndToEndAnAdaptersRequestsStayWhereItIsResident(t *testing.T) {
	routerBin, _ := binaries(t)
	sims := startLoRASims(t, 4, 4)
	for _, residency := range []bool{true, false} {
		router := startRouterProcess(t, routerBin, "--worker-urls", strings.Join(sims, ","),
			fmt.Sprintf("--lora-residency=%v", residency))
		adaptersKnown(t, router, 4)
		spread := 0
		for a := range 4 {
			before := processed(t, router, sims)
			for i := range 6 {
				if status := adapterPost(t, router, fmt.Sprint("a", a), fmt.Sprintf("request %d of adapter %d, a text of its own", i, a)); status != 200 {
					t.Fatalf("status %d", status)
				}
			}
			spread = max(spread, len(movedTo(before, processed(t, router, sims))))
		}
		if residency && spread != 1 {
			t.Fatalf("with residency an adapter's requests went to %d workers, want its one", spread)
		}
		if !residency && spread == 1 {
			t.Fatalf("without residency every adapter's requests stayed on one worker: the test shows nothing")
		}
	}
}

// workerIDs maps each registered worker's URL to its id.
func workerIDs(t *testing.T, router string) map[string]affinity.WorkerID {
	t.Helper()
	resp, err := http.Get(router + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			ID  affinity.WorkerID `json:"id"`
			URL string            `json:"url"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	out := map[string]affinity.WorkerID{}
	for _, w := range body.Workers {
		out[w.URL] = w.ID
	}
	return out
}

// homeOf is the worker of ids an adapter resident nowhere goes to: the
// first of its rendezvous order.
func homeOf(name string, ids map[string]affinity.WorkerID) string {
	loads := affinity.NewLoadTable(nil)
	var members []*affinity.Load
	byID := map[affinity.WorkerID]string{}
	for u, id := range ids {
		members = append(members, loads.Get(id))
		byID[id] = u
	}
	slices.SortFunc(members, func(a, b *affinity.Load) int { return int(a.ID()) - int(b.ID()) })
	p, _ := affinity.NewPolicy(affinity.Settings{Policy: affinity.PolicyLeastLoad, MissPlacement: affinity.PlaceLeastLoad}, nil)
	r := affinity.NewRouter(p, loads, nil, 16, nil)
	return byID[r.AdapterHome(affinity.AdapterKeyOf(name), affinity.NewPool(members))]
}

func TestEndToEndAPeersRequestsOfAnAdapterFillASlotForTheWholeTier(t *testing.T) {
	routerBin, _ := binaries(t)
	// A generation of 4,000 tokens at 20 ms holds its slot for 80 s, far
	// longer than the test needs it: a machine running the whole suite
	// must not end it first. The test cancels it when it is done.
	sims := startLoRASims(t, 2, 8, "--inter-token-latency", "20ms", "--max-model-len", "8192")
	routers := startReplicaSet(t, routerBin, 2, sims)
	for _, r := range routers {
		adaptersKnown(t, r, 8)
	}
	ids := workerIDs(t, routers[0])
	// a0 runs long through the first replica, where it is placed.
	home := homeOf("a0", ids)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 4)
	for i := range 4 {
		go func() { done <- holdSlot(ctx, routers[0], "a0", fmt.Sprint("a long generation ", i)) }()
	}
	defer func() {
		cancel()
		for range 4 {
			<-done
		}
	}()
	busy := fmt.Sprintf("vllm_router_worker_lora_busy_adapters{worker=%q}", home)
	slots := fmt.Sprintf("vllm_router_worker_lora_slots{worker=%q}", home)
	testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, routers[1], busy) == 1 && metric(t, routers[1], slots) == 1 },
		"the second replica hears of a0 in the one slot of %s", home)
	// An adapter whose own first choice is that worker goes to the other,
	// through the second replica, which sent nothing there itself.
	other := ""
	for i := 1; i < 8 && other == ""; i++ {
		if homeOf(fmt.Sprint("a", i), ids) == home {
			other = fmt.Sprint("a", i)
		}
	}
	if other == "" {
		t.Fatal("no adapter of a1..a7 starts its rendezvous order on a0's worker")
	}
	before := processed(t, routers[1], sims)
	for i := range 3 {
		if status := adapterPost(t, routers[1], other, fmt.Sprint("short ", i)); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	if got := movedTo(before, processed(t, routers[1], sims)); len(got) != 1 || got[0] == home {
		t.Fatalf("%s went to %v, want the worker whose slot a0 does not hold (a0 runs on %s)", other, got, home)
	}
	select { // the premise: a0 held its slot all along
	case err := <-done:
		t.Fatalf("a0's generation ended before the test did: %v", err)
	default:
	}
}

// holdSlot sends a completion of model through router that generates until
// ctx ends (4,000 tokens, ignore_eos), and returns why it ended: ctx's
// error, or what ended it first.
func holdSlot(ctx context.Context, router, model, prompt string) error {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 4000, "ignore_eos": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil {
		err = fmt.Errorf("the generation ended with status %d", resp.StatusCode)
	}
	return err
}

func TestEndToEndAnAdapterLoadedAtRunTimeIsRoutedWithinAScrape(t *testing.T) {
	routerBin, _ := binaries(t)
	sims := startLoRASims(t, 2, 1)
	router := startRouterProcess(t, routerBin, "--worker-urls", strings.Join(sims, ","))
	adaptersKnown(t, router, 1)
	if status := adapterPost(t, router, "late-lora", "hello"); status != 404 {
		t.Fatalf("an adapter no worker has: %d, want 404", status)
	}
	resp, err := http.Post(sims[1]+"/v1/load_lora_adapter", "application/json",
		strings.NewReader(`{"lora_name":"late-lora","lora_path":"/adapters/late"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("loading on the engine: %v %v", resp, err)
	}
	resp.Body.Close()
	took := testwait.Eventually(t, 10*time.Second, func() bool { return adapterPost(t, router, "late-lora", "hello") == 200 },
		"late-lora routed")
	if took > 3*time.Second {
		t.Errorf("routed %v after the load, want within a scrape (1 s) and a request", took)
	}
}

func TestEndToEndTheRouterLoadsAnAdapterNoWorkerHas(t *testing.T) {
	routerBin, _ := binaries(t)
	sims := startLoRASims(t, 3, 1)
	router := startRouterProcess(t, routerBin, "--worker-urls", strings.Join(sims, ","), "--lora-load-path", "/adapters/{name}")
	adaptersKnown(t, router, 1)
	for i := range 3 {
		if status := adapterPost(t, router, "fresh-lora", fmt.Sprint("hello ", i)); status != 200 {
			t.Fatalf("request %d of an adapter loaded on demand: %d", i, status)
		}
	}
	var holders []string
	for _, s := range sims {
		resp, err := http.Get(s + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), `"fresh-lora"`) {
			holders = append(holders, s)
		}
	}
	if len(holders) != 1 {
		t.Fatalf("fresh-lora loaded on %v, want on one worker", holders)
	}
	if m := metric(t, router, `vllm_router_lora_loads_total{result="ok"}`); m != 1 {
		t.Fatalf("%v loads counted, want 1", m)
	}
}

// chatAs sends one chat turn of model through router, salted with salt
// ("" for none), and returns the worker that answered and its cached
// tokens.
func chatAs(t *testing.T, router, model, salt, content string) (string, int) {
	t.Helper()
	req := map[string]any{"model": model, "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": content}}}
	if salt != "" {
		req["cache_salt"] = salt
	}
	b, _ := json.Marshal(req)
	resp, err := http.Post(router+"/v1/chat/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(body, &out) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	return resp.Header.Get("x-worker-id"), out.Usage.Details.Cached
}

func TestEndToEndSaltedAndUnsaltedRequestsNeverCountAsEachOthersHits(t *testing.T) {
	routerBin, workersim := binaries(t)
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("kv-events=%v", events), func(t *testing.T) {
			var ws []kvWorker
			for i := range 2 {
				ws = append(ws, startKVWorker(t, workersim, fmt.Sprint("w", i), "--kv-capacity-tokens", "65536",
					"--lora-modules", `{"name":"sql-lora","path":"/adapters/sql"}`, "--max-loras", "2"))
			}
			router := kvRouter(t, routerBin, ws, events)
			content := strings.Repeat("A tenant's long system prompt that two tenants happen to share. ", 40)
			chatAs(t, router, "sim-model", "tenant-a", content)
			for _, step := range []struct {
				model, salt string
				hit         bool
			}{
				{"sim-model", "tenant-a", true},
				{"sim-model", "", false},
				{"sim-model", "tenant-b", false},
				{"sql-lora", "tenant-a", false},
				{"sql-lora", "", false},
				{"sql-lora", "", true},
			} {
				hitsBefore := metric(t, router, "vllm_router_cache_hits_total")
				_, cached := chatAs(t, router, step.model, step.salt, content)
				predicted := metric(t, router, "vllm_router_cache_hits_total") > hitsBefore
				if (cached > 0) != step.hit || predicted != step.hit {
					t.Fatalf("%s salted %q: the engine cached %d tokens, the router predicted a hit: %v; want a hit %v",
						step.model, step.salt, cached, predicted, step.hit)
				}
			}
			if f := metric(t, router, "vllm_router_false_hits_total"); f != 0 {
				t.Fatalf("%v false hits", f)
			}
		})
	}
}
