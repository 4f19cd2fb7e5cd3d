package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func pdWorkers(t *testing.T) (prefill, decodeW *testWorker) {
	pc, dc := testConfig(), testConfig()
	pc.role, dc.role = rolePrefill, roleDecode
	pc.workerID, dc.workerID = "prefill-0", "decode-0"
	return startWorker(t, pc), startWorker(t, dc)
}

const prefillParams = `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// TestPDParamsRoundTrip runs the vLLM NIXL sequence: the prefill worker computes the prompt and
// answers with where its KV is; the decode worker, given those parameters, generates without
// computing the prompt.
func TestPDParamsRoundTrip(t *testing.T) {
	prefill, decodeW := pdWorkers(t)
	prompt := longPrompt("pd", 3000) // 750 tokens, 47 blocks
	status, _, body := prefill.post(pathCompletions,
		fmt.Sprintf(`{"prompt":%q,"max_tokens":1,"stream":false,%s}`, prompt, prefillParams))
	c := decode(t, body)
	kv := c.KVTransferParams
	if status != http.StatusOK || kv == nil {
		t.Fatalf("prefill answered %d without kv_transfer_params: %s", status, body)
	}
	host, port := splitAddr(t, prefill.addr)
	if !kv.DoRemotePrefill || kv.DoRemoteDecode || kv.RemoteEngineID != "prefill-0" ||
		len(kv.RemoteBlockIDs) != 47 || kv.RemoteHost != host || kv.RemotePort != port {
		t.Fatalf("kv_transfer_params = %+v, want remote prefill from prefill-0 at %s with 47 blocks", kv, prefill.addr)
	}
	if c.Usage.CompletionTokens != 1 || c.Usage.PromptTokens != 750 {
		t.Fatalf("prefill usage = %+v", c.Usage)
	}
	params, _ := json.Marshal(map[string]any{"kv_transfer_params": kv})
	status, _, body = decodeW.post(pathCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":20,%s`,
		prompt, strings.TrimPrefix(string(params), "{")))
	if c := decode(t, body); status != http.StatusOK || c.Usage.CompletionTokens != 20 {
		t.Fatalf("decode answered %d: %s", status, body)
	}
	if got := decodeW.metric("workersim_kv_transfer_tokens_total"); got != 750 {
		t.Errorf("decode worker transferred %v tokens, want the 750 of the prompt", got)
	}
	if got := decodeW.metric("workersim_prefill_computed_tokens_total"); got != 0 {
		t.Errorf("decode worker computed %v prompt tokens, want none", got)
	}
	if got := prefill.metric("workersim_prefill_computed_tokens_total"); got != 750 {
		t.Errorf("prefill worker computed %v prompt tokens, want 750", got)
	}
}

func TestPrefillPhaseIgnoresStreamingAndLength(t *testing.T) {
	prefill, _ := pdWorkers(t)
	status, h, body := prefill.post(pathChatCompletions, fmt.Sprintf(
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":50,"stream":true,%s}`, prefillParams))
	if c := decode(t, body); status != http.StatusOK || c.Usage.CompletionTokens != 1 || c.KVTransferParams == nil {
		t.Fatalf("status %d, content type %q, body %s", status, h.Get("Content-Type"), body)
	}
}

func TestDecodePhaseRefusesIncompleteParams(t *testing.T) {
	_, decodeW := pdWorkers(t)
	for name, kv := range map[string]string{
		"no engine id":    `{"do_remote_prefill":true,"remote_block_ids":[1,2],"remote_host":"h","remote_port":1}`,
		"null engine id":  `{"do_remote_prefill":true,"remote_engine_id":null,"remote_block_ids":[1,2]}`,
		"no block ids":    `{"do_remote_prefill":true,"remote_engine_id":"p","remote_host":"h","remote_port":1}`,
		"null block ids":  `{"do_remote_prefill":true,"remote_engine_id":"p","remote_block_ids":null}`,
		"both directions": `{"do_remote_prefill":true,"do_remote_decode":true,"remote_engine_id":"p","remote_block_ids":[]}`,
	} {
		status, _, body := decodeW.post(pathCompletions, `{"prompt":"hello","kv_transfer_params":`+kv+`}`)
		if c := decode(t, body); status != http.StatusBadRequest || c.Error == nil {
			t.Errorf("%s: status %d, body %s", name, status, body)
		}
	}
}

func TestRolesRefuseTheOtherPhase(t *testing.T) {
	prefill, decodeW := pdWorkers(t)
	if status, _, body := decodeW.post(pathCompletions, `{"prompt":"x",`+prefillParams+`}`); status != http.StatusBadRequest {
		t.Errorf("decode worker served a prefill phase: %d %s", status, body)
	}
	remote := `"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"p","remote_block_ids":[0]}`
	if status, _, body := prefill.post(pathCompletions, `{"prompt":"x",`+remote+`}`); status != http.StatusBadRequest {
		t.Errorf("prefill worker served a decode phase: %d %s", status, body)
	}
	for _, w := range []*testWorker{prefill, decodeW} {
		if status, _, body := w.post(pathCompletions, `{"prompt":"x","max_tokens":3}`); status != http.StatusOK {
			t.Errorf("%s refused an ordinary request: %d %s", w.s.workerID, status, body)
		}
	}
}

func TestBootstrapRequestsPlayTheirRole(t *testing.T) {
	prefill, decodeW := pdWorkers(t)
	prompt := longPrompt("sgl", 400) // 100 tokens
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":8,"bootstrap_host":"127.0.0.1","bootstrap_port":8998,"bootstrap_room":%d}`,
		prompt, int64(1)<<62)
	_, _, pb := prefill.post(pathCompletions, body)
	if c := decode(t, pb); c.Usage.CompletionTokens != 1 {
		t.Errorf("prefill worker generated %d tokens, want 1", c.Usage.CompletionTokens)
	}
	_, _, db := decodeW.post(pathCompletions, body)
	if c := decode(t, db); c.Usage.CompletionTokens != 8 {
		t.Errorf("decode worker generated %d tokens, want 8", c.Usage.CompletionTokens)
	}
	if got := decodeW.metric("workersim_kv_transfer_tokens_total"); got != 100 {
		t.Errorf("decode worker transferred %v tokens, want 100", got)
	}
	if got := prefill.metric(`workersim_pd_requests_total{phase="prefill"}`); got != 1 {
		t.Errorf("prefill phases counted = %v", got)
	}
}

func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	return addr[:i], port
}
