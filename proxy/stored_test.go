package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// responseStore is a fake engine's store of responses, as vLLM's Responses
// API keeps them: POST makes one under the request_id it was given (else
// an id of its own) with the metadata it was given (a key named twice
// keeps its last value, as Python's json does), GET shows it, DELETE
// removes it, .../cancel and .../input_items answer for it, and a
// continuation needs its previous response.
type responseStore struct {
	name string
	mu   sync.Mutex
	byID map[string]string // id -> the response object
	n    atomic.Int64
}

func newResponseStore(name string) *responseStore {
	return &responseStore{name: name, byID: map[string]string{}}
}

func (s *responseStore) serve(e *fakeworker.Exchange) {
	path := e.Req.URL.Path
	switch {
	case e.Req.Method == http.MethodPost && path == "/v1/responses":
		req := readCreate(e.Body)
		if req.Previous != "" && s.get(req.Previous) == "" {
			e.JSON(404, `{"error":{"message":"no such previous response"}}`)
			return
		}
		meta := "{}"
		if req.Metadata != nil {
			b, _ := json.Marshal(req.Metadata)
			meta = string(b)
		}
		id := req.RequestID
		if id == "" {
			id = fmt.Sprintf("resp_%s%d", s.name, s.n.Add(1))
		}
		// spacing as Python's json.dumps writes it: "id": "resp_..."
		obj := fmt.Sprintf(`{"id": %q, "object": "response", "status": "completed", "metadata": %s, "output": []}`, id, meta)
		s.mu.Lock()
		s.byID[id] = obj
		s.mu.Unlock()
		e.JSON(200, obj)
	case strings.HasPrefix(path, "/v1/responses/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(path, "/v1/responses/"), "/")
		obj := s.get(id)
		switch {
		case obj == "":
			e.JSON(404, `{"error":{"message":"not found"}}`)
		case e.Req.Method == http.MethodDelete:
			s.mu.Lock()
			delete(s.byID, id)
			s.mu.Unlock()
			e.JSON(200, fmt.Sprintf(`{"id":%q,"object":"response","deleted":true}`, id))
		case sub == "input_items":
			e.JSON(200, `{"object":"list","data":[{"type":"message","content":"the secret input"}]}`)
		default:
			e.JSON(200, obj)
		}
	case strings.HasSuffix(path, "/health"):
		e.JSON(200, `{}`)
	default:
		e.JSON(404, `{"error":{"message":"not found"}}`)
	}
}

// createRequest is what a fake engine reads of a POST /v1/responses: a
// key its metadata names twice keeps its last value, as Python's json
// does.
type createRequest struct {
	Metadata  map[string]string `json:"metadata"`
	Previous  string            `json:"previous_response_id"`
	RequestID string            `json:"request_id"`
}

func readCreate(body []byte) createRequest {
	var req createRequest
	_ = json.Unmarshal(body, &req)
	return req
}

func (s *responseStore) get(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// callKey sends a request with key's bearer and returns status and body.
func callKey(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func createResponse(t *testing.T, url, key string) string {
	t.Helper()
	status, body := callKey(t, "POST", url+"/v1/responses", key, `{"model":"m","input":"my secret","metadata":{"app":"x"}}`)
	var created struct{ ID string }
	if json.Unmarshal([]byte(body), &created); status != 200 || created.ID == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	return created.ID
}

// storeTier is two replicas (proxies that share nothing but the workers
// and the tier's secret) in front of two engines that keep stored
// responses.
func storeTier(t *testing.T, keys []string) (a, b *testRouter) {
	t.Helper()
	w1, w2 := startFake(t, "w1"), startFake(t, "w2")
	w1.SetEvery(newResponseStore("w1").serve)
	w2.SetEvery(newResponseStore("w2").serve)
	cfg := Config{APIKeys: keys}
	return startTierRouter(t, cfg, w1, w2), startTierRouter(t, cfg, w1, w2)
}

// tierSecrets are the secrets a test tier shares (its gossip keyring).
func tierSecrets() [][]byte { return [][]byte{[]byte("0123456789abcdef")} }

// startTierRouter is startRouter for a replica of a tier: it shares
// tierSecrets.
func startTierRouter(t *testing.T, cfg Config, workers ...*fakeworker.Worker) *testRouter {
	t.Helper()
	var ws []Worker
	for i, w := range workers {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: w.URL, Role: RoleRegular})
	}
	return startTierRouterOf(t, cfg, ws)
}

// startTierRouterOf is startTierRouter in front of the workers ws.
func startTierRouterOf(t *testing.T, cfg Config, ws []Worker) *testRouter {
	t.Helper()
	p, err := buildProxyWith(cfg, affinity.PolicyCacheAware, ws, func(d *Deps) { d.OwnerSecrets = tierSecrets })
	if err != nil {
		t.Fatal(err)
	}
	return serveRouter(t, p)
}

// With --api-keys a stored response belongs to the key that made it, on
// the replica that relayed it and on every other one: another key gets 404
// for each thing it could do with it, the owner gets its answers.
func TestAStoredResponseBelongsToTheKeyThatMadeIt(t *testing.T) {
	a, b := storeTier(t, []string{"k1", "k2"})
	id := createResponse(t, a.url, "k1")
	for _, r := range []*testRouter{a, b} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/responses/" + id, ""},
			{"GET", "/v1/responses/" + id + "/input_items", ""},
			{"POST", "/v1/responses/" + id + "/cancel", ""},
			{"POST", "/v1/responses", fmt.Sprintf(`{"model":"m","input":"go on","previous_response_id":%q}`, id)},
			{"DELETE", "/v1/responses/" + id, ""},
		} {
			if status, body := callKey(t, c.method, r.url+c.path, "k2", c.body); status != 404 || strings.Contains(body, "secret") {
				t.Errorf("replica %s: k2 %s %s: %d %s, want 404", r.url, c.method, c.path, status, body)
			}
		}
		if status, body := callKey(t, "GET", r.url+"/v1/responses/"+id, "k1", ""); status != 200 || !strings.Contains(body, id) {
			t.Errorf("replica %s: the owner's GET: %d %s", r.url, status, body)
		}
		cont := fmt.Sprintf(`{"model":"m","input":"go on","previous_response_id":%q}`, id)
		if status, body := callKey(t, "POST", r.url+"/v1/responses", "k1", cont); status != 200 {
			t.Errorf("replica %s: the owner's continuation: %d %s", r.url, status, body)
		}
	}
	if status, body := callKey(t, "DELETE", b.url+"/v1/responses/"+id, "k1", ""); status != 200 {
		t.Fatalf("the owner's DELETE on the other replica: %d %s", status, body)
	}
}

// A client cannot claim another key's response by writing an owner into
// the metadata itself, nor choose the response's id: the router writes
// both, over the client's.
func TestTheOwnerIsTheRoutersToWrite(t *testing.T) {
	a, b := storeTier(t, []string{"k1", "k2"})
	k1 := createResponse(t, a.url, "k1")
	_, shown := callKey(t, "GET", a.url+"/v1/responses/"+k1, "k1", "")
	var obj struct {
		Metadata map[string]string `json:"metadata"`
	}
	_ = json.Unmarshal([]byte(shown), &obj)
	body := fmt.Sprintf(`{"model":"m","input":"x","request_id":%q,"metadata":{%q:%q}}`, k1, ownerMetadataKey, obj.Metadata[ownerMetadataKey])
	status, answer := callKey(t, "POST", a.url+"/v1/responses", "k2", body)
	var created struct{ ID string }
	if json.Unmarshal([]byte(answer), &created); status != 200 || created.ID == "" || created.ID == k1 {
		t.Fatalf("create with k1's id and seal: %d %s", status, answer)
	}
	if status, _ := callKey(t, "GET", b.url+"/v1/responses/"+created.ID, "k1", ""); status != 404 {
		t.Fatalf("k1 read k2's response by a copied seal: %d", status)
	}
	if status, _ := callKey(t, "GET", b.url+"/v1/responses/"+created.ID, "k2", ""); status != 200 {
		t.Fatalf("k2 could not read its own response on the other replica: %d", status)
	}
	if status, body := callKey(t, "GET", b.url+"/v1/responses/"+k1, "k1", ""); status != 200 || !strings.Contains(body, k1) {
		t.Fatalf("k1's response after k2 asked for its id: %d %s", status, body)
	}
}

// A worker that answers 200 to any id does not become the owner of ids it
// never made: the one that made the response keeps it.
func TestAWorkerThatAnswersAnyIDOwnsNothing(t *testing.T) {
	liar, maker := startFake(t, "liar"), startFake(t, "maker")
	liar.SetEvery(func(e *fakeworker.Exchange) {
		e.JSON(200, `{"id":"resp_other","object":"response","status":"completed","metadata":{}}`)
	})
	store := newResponseStore("maker")
	maker.SetEvery(store.serve)
	ws := []Worker{{ID: 1, URL: liar.URL, Role: RoleRegular}, {ID: 2, URL: maker.URL, Role: RoleRegular}}
	a := startTierRouterOf(t, Config{}, ws)
	b := startTierRouterOf(t, Config{}, ws)
	var id string
	for i := 0; id == "" && i < 50; i++ { // until the maker made one (the router picks the worker)
		status, body := callKey(t, "POST", b.url+"/v1/responses", "", fmt.Sprintf(`{"model":"m","input":"prompt %d"}`, i))
		var created struct{ ID string }
		if json.Unmarshal([]byte(body), &created); status != 200 {
			t.Fatalf("create: %d %s", status, body)
		}
		if store.get(created.ID) != "" {
			id = created.ID
		}
	}
	if id == "" {
		t.Fatal("the maker made no response in 50 tries")
	}
	for _, r := range []*testRouter{a, b} {
		status, body := callKey(t, "GET", r.url+"/v1/responses/"+id, "", "")
		if status != 200 || !strings.Contains(body, id) {
			t.Errorf("replica %s: GET %s: %d %s, want the maker's answer", r.url, id, status, body)
		}
	}
}

// The search for the owner of a stored response comes after admission: a
// request the router refuses at its limit asks no worker.
func TestTheOwnerSearchComesAfterAdmission(t *testing.T) {
	w := startFake(t, "w1")
	w.SetEvery(newResponseStore("w1").serve)
	r := startRouter(t, Config{Admission: admission.Config{Capacity: 1, RefillPerSec: 0.001}}, w)
	if status, _ := callKey(t, "GET", r.url+"/v1/responses/resp_first", "", ""); status != 404 {
		t.Fatalf("the first lookup: %d, want 404", status)
	}
	if status, body := callKey(t, "GET", r.url+"/v1/responses/resp_second", "", ""); status != 429 {
		t.Fatalf("past the admission limit: %d %s, want 429", status, body)
	}
	for _, p := range w.Paths() {
		if strings.Contains(p, "resp_second") {
			t.Fatalf("a request refused at admission asked the worker: %s", p)
		}
	}
}

// A client that leaves while the router looks for the owner ends the
// search: the worker being asked sees its connection closed, long before
// the lookup's own deadline.
func TestAClientThatLeavesEndsTheOwnerSearch(t *testing.T) {
	w := startFake(t, "w1")
	asked := make(chan struct{}, 1)
	w.SetEvery(func(e *fakeworker.Exchange) {
		if strings.HasSuffix(e.Req.URL.Path, "/health") {
			e.JSON(200, `{}`)
			return
		}
		asked <- struct{}{}
		e.WaitHangUp()
	})
	r := startRouter(t, Config{DialTimeout: time.Hour}, w)
	c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /v1/responses/resp_x HTTP/1.1\r\nHost: r\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker was never asked")
	}
	c.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker's lookup to be hung up")
}
