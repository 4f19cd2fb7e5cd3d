package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// forger is a hostile worker: it remembers the owner entry of the last
// POST /v1/responses it was sent, and answers GET /v1/responses/{any id}
// with that id, that owner and an answer of its own; it counts the
// continuations it is sent.
type forger struct {
	mu        sync.Mutex
	seen      string
	continued atomic.Int64
}

func (f *forger) serve(e *fakeworker.Exchange) {
	path := e.Req.URL.Path
	switch {
	case strings.HasSuffix(path, "/health"):
		e.JSON(200, `{}`)
	case e.Req.Method == http.MethodPost && path == "/v1/responses":
		req := readCreate(e.Body)
		if req.Previous != "" {
			f.continued.Add(1)
		}
		f.mu.Lock()
		f.seen = req.Metadata[ownerMetadataKey]
		f.mu.Unlock()
		e.JSON(200, fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","metadata":%s}`, cmpOr(req.RequestID, "resp_f1"),
			mustJSON(req.Metadata)))
	case strings.HasPrefix(path, "/v1/responses/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1/responses/"), "/")
		f.mu.Lock()
		seen := f.seen
		f.mu.Unlock()
		e.JSON(200, fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","metadata":{%q:%q},"output":"forged"}`, id,
			ownerMetadataKey, seen))
	default:
		e.JSON(404, `{"error":{"message":"not found"}}`)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A hostile worker that saw k1's owner entry in an earlier request shows
// it with any response id asked of it: a replica that did not relay k1's
// response used to take it as the owner, serve its forged answer and send
// it k1's next turn. The seal is of the response's id, and the worker
// cannot make one: the honest worker keeps the response.
func TestAWorkerCannotForgeTheOwnerOfAResponse(t *testing.T) {
	hostile, honest := startFake(t, "hostile"), startFake(t, "honest")
	f := &forger{}
	hostile.SetEvery(f.serve)
	honest.SetEvery(newResponseStore("honest").serve)
	cfg := Config{APIKeys: []string{"k1", "k2"}}
	hw, gw := Worker{ID: 1, URL: hostile.URL, Role: RoleRegular}, Worker{ID: 2, URL: honest.URL, Role: RoleRegular}
	a := startTierRouterOf(t, cfg, []Worker{hw})
	createResponse(t, a.url, "k1") // the hostile worker sees k1's owner entry
	a.proxy.Fleet().SetWorkers([]Worker{gw})
	id := createResponse(t, a.url, "k1")
	b := startTierRouterOf(t, cfg, []Worker{hw, gw})
	if status, body := callKey(t, "GET", b.url+"/v1/responses/"+id, "k1", ""); status != 200 || strings.Contains(body, "forged") {
		t.Fatalf("k1's response through a replica that did not relay it: %d %s, want the honest worker's", status, body)
	}
	cont := fmt.Sprintf(`{"model":"m","input":"my next secret","previous_response_id":%q}`, id)
	if status, body := callKey(t, "POST", b.url+"/v1/responses", "k1", cont); status != 200 {
		t.Fatalf("k1's continuation: %d %s", status, body)
	}
	if n := f.continued.Load(); n != 0 {
		t.Fatalf("the hostile worker was sent %d of k1's continuations", n)
	}
}

// legacyPrint is the owner entry main wrote: a labelled SHA-256 of the key.
func legacyPrint(key string) string {
	sum := sha256.Sum256([]byte("kvrouter stored response owner\x00" + key))
	return hex.EncodeToString(sum[:16])
}

// metadata naming kvrouter_owner twice reached the engine, which keeps the
// last (vLLM does): k2 could plant a response whose owner is k1's, which
// k1 then read (and deleted) through another replica. A metadata object
// that names a key twice is a 400.
func TestMetadataThatNamesAKeyTwiceIsRefused(t *testing.T) {
	a, b := storeTier(t, []string{"k1", "k2"})
	for _, meta := range []string{
		fmt.Sprintf(`{%q:"x",%q:%q}`, ownerMetadataKey, ownerMetadataKey, legacyPrint("k1")),
		fmt.Sprintf(`{"app":"x","kvrouter\u005fowner":"y","%s":%q}`, ownerMetadataKey, legacyPrint("k1")),
	} {
		status, body := callKey(t, "POST", a.url+"/v1/responses", "k2", `{"model":"m","input":"planted","metadata":`+meta+`}`)
		var created struct{ ID string }
		_ = json.Unmarshal([]byte(body), &created)
		if created.ID != "" {
			if got, _ := callKey(t, "GET", b.url+"/v1/responses/"+created.ID, "k1", ""); got == 200 {
				t.Errorf("k1 reads the response k2 planted with %s", meta)
			}
		}
		if status != http.StatusBadRequest || !strings.Contains(body, "metadata") {
			t.Errorf("metadata %s: %d %s, want a 400 naming the metadata", meta, status, body)
		}
	}
}

// Without a secret the replicas share (no gossip key), a replica seals
// with its own: a response is found through the replica that relayed it,
// and the others fail closed.
func TestWithoutASharedSecretOnlyTheRelayingReplicaFindsAResponse(t *testing.T) {
	w := startFake(t, "w1")
	w.SetEvery(newResponseStore("w1").serve)
	ws := []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}}
	a := startRouterWith(t, Config{APIKeys: []string{"k1"}}, "", affinity.PolicyCacheAware, ws)
	b := startRouterWith(t, Config{APIKeys: []string{"k1"}}, "", affinity.PolicyCacheAware, ws)
	id := createResponse(t, a.url, "k1")
	if status, _ := callKey(t, "GET", a.url+"/v1/responses/"+id, "k1", ""); status != 200 {
		t.Fatalf("through the replica that relayed it: %d", status)
	}
	if status, _ := callKey(t, "GET", b.url+"/v1/responses/"+id, "k1", ""); status != 404 {
		t.Fatalf("through another replica with a secret of its own: %d, want 404", status)
	}
}
