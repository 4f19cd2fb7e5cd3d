package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

// adminClient talks to an Admin served by fasthttp on a loopback port.
type adminClient struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

// serveAdmin serves admin on 127.0.0.1 behind a fallback that answers 418
// for paths Serve declines, so tests can see which paths it claims.
func serveAdmin(t *testing.T, admin *Admin) *adminClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !admin.Serve(ctx) {
				ctx.SetStatusCode(http.StatusTeapot)
			}
		},
		// The worker pool's cleaner sleeps this long between rounds and
		// only notices Shutdown afterwards: keep it short for goleak.
		MaxIdleWorkerDuration: 10 * time.Millisecond,
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		_ = ln.Close() // a Serve not yet started would otherwise serve on
		wg.Wait()
	})
	return &adminClient{t: t, base: "http://" + ln.Addr().String(),
		http: &http.Client{Timeout: testDeadline, Transport: &http.Transport{DisableKeepAlives: true}}}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (c *adminClient) do(method, path, body string) reply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

func (r reply) worker(t *testing.T) store.Worker {
	t.Helper()
	var w store.Worker
	if err := json.Unmarshal([]byte(r.body), &w); err != nil {
		t.Fatalf("decode worker from %q: %v", r.body, err)
	}
	return w
}

// apiError decodes an OpenAI-style error body.
func (r reply) apiError(t *testing.T) adminapi.ErrorDetail {
	t.Helper()
	var b adminapi.ErrorBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil || b.Error.Code != r.status {
		t.Fatalf("error body %q (status %d) is not OpenAI-style: %v", r.body, r.status, err)
	}
	return b.Error
}

func expectStatus(t *testing.T, r reply, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %s", r.status, want, r.body)
	}
}

// raftAdmin serves an Admin backed by a real one-node Raft cluster.
func raftAdmin(t *testing.T) (*adminClient, *testNode) {
	t.Helper()
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, n)
	admin := New(Config{Registry: n.fsm.View, Apply: n.Apply})
	return serveAdmin(t, admin), n
}

func TestAdminWorkerLifecycleThroughRaft(t *testing.T) {
	c, n := raftAdmin(t)
	body := `{"url":"HTTP://W1:8000/","role":"prefill","model":"m","bootstrap_port":8998,"labels":{"zone":"a"}}`
	r := c.do("POST", "/workers", body)
	expectStatus(t, r, http.StatusCreated)
	w := r.worker(t)
	if w.ID != 1 || w.URL != "http://w1:8000" || w.Role != store.RolePrefill || w.Model != "m" ||
		w.BootstrapPort != 8998 || w.Labels["zone"] != "a" || w.State != store.StateActive {
		t.Fatalf("created worker = %+v", w)
	}
	if again := c.do("POST", "/workers", `{"url":"http://w1:8000"}`); again.status != http.StatusOK || again.worker(t).ID != 1 {
		t.Fatalf("re-adding: status %d body %s, want 200 with id 1", again.status, again.body)
	}

	var list struct{ Workers []store.Worker }
	if err := json.Unmarshal([]byte(c.do("GET", "/workers", "").body), &list); err != nil || len(list.Workers) != 1 {
		t.Fatalf("GET /workers = %+v, %v", list, err)
	}

	r = c.do("POST", "/workers/1/drain", "")
	expectStatus(t, r, http.StatusOK)
	if got, _ := n.fsm.View().Worker(1); r.worker(t).State != store.StateDraining || got.State != store.StateDraining {
		t.Fatalf("after drain: response %s, registry %+v", r.body, got)
	}
	expectStatus(t, c.do("POST", "/workers/1/activate", ""), http.StatusOK)
	if got, _ := n.fsm.View().Worker(1); got.State != store.StateActive {
		t.Fatalf("after activate: %+v", got)
	}

	expectStatus(t, c.do("DELETE", "/workers/1", ""), http.StatusOK)
	expectStatus(t, c.do("GET", "/workers/1", ""), http.StatusNotFound)
	r = c.do("DELETE", "/workers/1", "")
	expectStatus(t, r, http.StatusNotFound)
	if e := r.apiError(t); e.Type != "not_found_error" {
		t.Fatalf("error type %q", e.Type)
	}
}

func TestAdminRefusesInvalidRequestsWith400NamingTheField(t *testing.T) {
	c, n := raftAdmin(t)
	cases := []struct{ method, path, body, mention string }{
		{"POST", "/workers", `{"url":"ftp://x:1"}`, "url"},
		{"POST", "/workers", `{"role":"prefill"}`, "url"},
		{"POST", "/workers", `{"url":"http://h:1","role":"boss"}`, "role"},
		{"POST", "/workers", `{"url":"http://h:1","bootstrap_port":"8998"}`, "bootstrap_port"},
		{"POST", "/workers", `{"url":"http://h:1","uri":"x"}`, "uri"},
		{"POST", "/workers", `{"url":`, "JSON"},
		{"POST", "/workers", `{"url":"http://127.0.0.1:1","url":"http://169.254.169.254:80"}`, `the key "url" twice`},
		{"POST", "/workers", `{"url":"http://h:1","labels":{"a":"1","a":"2"}}`, `the body.labels names the key "a" twice`},
		{"POST", "/workers/abc/drain", ``, "id"},
		{"DELETE", "/workers/0", ``, "id"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			r := c.do(tc.method, tc.path, tc.body)
			expectStatus(t, r, http.StatusBadRequest)
			if e := r.apiError(t); !strings.Contains(e.Message, tc.mention) || e.Type != "invalid_request_error" {
				t.Fatalf("error %+v does not mention %q", e, tc.mention)
			}
		})
	}
	if n.fsm.View().Len() != 0 {
		t.Fatal("an invalid request reached the registry")
	}
}

// The admin API refuses a key named twice in its bodies, as the inference
// API does: encoding/json would apply the last of them.
func TestAdminRefusesDuplicateKeys(t *testing.T) {
	c := fakeAdmin(t, Config{
		SetRouting: func(context.Context, adminapi.RoutingView) (adminapi.RoutingView, error) {
			t.Error("a routing change with a key given twice was applied")
			return adminapi.RoutingView{}, nil
		},
		Keyring: func(context.Context, adminapi.KeyringOp, []byte) ([]adminapi.NodeKeyring, error) {
			t.Error("a keyring change with a key given twice was applied")
			return nil, nil
		}}, nil)
	for _, tc := range []struct{ method, path, body, mention string }{
		{"POST", "/workers", `{"url":"http://127.0.0.1:1","url":"http://127.0.0.2:1"}`, `the body names the key "url" twice`},
		{"POST", "/workers", `{"url":"http://h:1","labels":{"a":"1","a":"2"}}`, `the body.labels names the key "a" twice`},
		{"PUT", "/cluster/routing", `{"index":1,"config":{},"index":2}`, `names the key "index" twice`},
		{"POST", "/cluster/keyring/install", `{"key":"MDEyMzQ1Njc4OWFiY2RlZg==","key":"x"}`, `names the key "key" twice`},
	} {
		r := c.do(tc.method, tc.path, tc.body)
		expectStatus(t, r, http.StatusBadRequest)
		if e := r.apiError(t); !strings.Contains(e.Message, tc.mention) {
			t.Errorf("%s %s: %q does not say %q", tc.method, tc.path, e.Message, tc.mention)
		}
	}
}

func TestAdminReAddWithAnotherRoleIs409(t *testing.T) {
	c, _ := raftAdmin(t)
	expectStatus(t, c.do("POST", "/workers", `{"url":"http://w:1","role":"prefill"}`), http.StatusCreated)
	r := c.do("POST", "/workers", `{"url":"http://w:1","role":"decode"}`)
	expectStatus(t, r, http.StatusConflict)
	if e := r.apiError(t); !strings.Contains(e.Message, "role") {
		t.Fatalf("conflict message %q does not name the role", e.Message)
	}
}

func TestAdminLegacyEndpointsAnswerLikeVllmRouter(t *testing.T) {
	c, _ := raftAdmin(t)
	r := c.do("POST", "/add_worker?url=http://w1:8000", "")
	if r.status != http.StatusOK || r.body != "Successfully added worker: http://w1:8000" {
		t.Fatalf("add_worker: %d %q", r.status, r.body)
	}
	r = c.do("POST", "/add_worker?url=http://w1:8000", "")
	if r.status != http.StatusBadRequest || r.body != "Worker http://w1:8000 already exists" {
		t.Fatalf("second add_worker: %d %q", r.status, r.body)
	}
	if r = c.do("GET", "/list_workers", ""); r.body != `{"urls":["http://w1:8000"]}` {
		t.Fatalf("list_workers: %d %q", r.status, r.body)
	}
	for range 2 { // removing is idempotent, as in vllm-router
		r = c.do("POST", "/remove_worker?url=http://w1:8000", "")
		if r.status != http.StatusOK || r.body != "Successfully removed worker: http://w1:8000" {
			t.Fatalf("remove_worker: %d %q", r.status, r.body)
		}
	}
	if r = c.do("GET", "/list_workers", ""); r.body != `{"urls":[]}` {
		t.Fatalf("list_workers after removal: %q", r.body)
	}
	expectStatus(t, c.do("POST", "/add_worker", ""), http.StatusBadRequest)
	expectStatus(t, c.do("POST", "/add_worker?url=nope", ""), http.StatusBadRequest)
}

// fakeAdmin serves an Admin whose Apply is fn (nil: writes fail the test),
// over an empty registry.
func fakeAdmin(t *testing.T, cfg Config, fn func(context.Context, store.Command) (store.Result, error)) *adminClient {
	t.Helper()
	cfg.Registry = store.NewFSM().View
	cfg.Apply = fn
	if fn == nil {
		cfg.Apply = func(context.Context, store.Command) (store.Result, error) {
			t.Error("unexpected write")
			return store.Result{}, nil
		}
	}
	return serveAdmin(t, New(cfg))
}

func TestAdminAnswers503WithoutALeaderAnd504OnTimeout(t *testing.T) {
	cases := []struct {
		name    string
		err     func(ctx context.Context) error
		status  int
		mention string
	}{
		{"no leader", func(context.Context) error { return raftnode.ErrNoLeader }, http.StatusServiceUnavailable, "no raft leader"},
		{"follower", func(context.Context) error {
			return &raftnode.NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:7001"}
		},
			http.StatusServiceUnavailable, "n2 at 127.0.0.1:7001"},
		{"closed", func(context.Context) error { return raftnode.ErrClosed }, http.StatusServiceUnavailable, "closed"},
		{"deadline", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, http.StatusGatewayTimeout, "in time"},
		{"raft timeout", func(context.Context) error { return raftnode.ErrTimeout }, http.StatusGatewayTimeout, "timed out"},
		{"unexpected", func(context.Context) error { return fmt.Errorf("disk on fire") }, http.StatusInternalServerError, "disk on fire"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeAdmin(t, Config{ApplyTimeout: 50 * time.Millisecond},
				func(ctx context.Context, _ store.Command) (store.Result, error) { return store.Result{}, tc.err(ctx) })
			r := c.do("POST", "/workers", `{"url":"http://w:1"}`)
			expectStatus(t, r, tc.status)
			if e := r.apiError(t); !strings.Contains(e.Message, tc.mention) {
				t.Fatalf("message %q does not mention %q", e.Message, tc.mention)
			}
			if tc.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		})
	}
}

func TestAdminRequiresTheBearerTokenWhenOneIsSet(t *testing.T) {
	applied := false
	c := fakeAdmin(t, Config{Token: "s3cret"}, func(context.Context, store.Command) (store.Result, error) {
		applied = true
		return store.Result{ID: 1, Created: true}, nil
	})
	for _, token := range []string{"", "wrong", "s3cret2"} {
		c.token = token
		r := c.do("POST", "/workers", `{"url":"http://w:1"}`)
		expectStatus(t, r, http.StatusUnauthorized)
		if r.header.Get("WWW-Authenticate") == "" || r.apiError(t).Type != "authentication_error" {
			t.Fatalf("token %q: 401 without challenge or with body %s", token, r.body)
		}
	}
	if applied {
		t.Fatal("an unauthenticated write was applied")
	}
	c.token = "s3cret"
	expectStatus(t, c.do("POST", "/workers", `{"url":"http://w:1"}`), http.StatusCreated)
	expectStatus(t, c.do("GET", "/workers", ""), http.StatusOK)
}

func TestAdminWithoutATokenServesOnlyLoopbackClients(t *testing.T) {
	admin := New(Config{Registry: store.NewFSM().View,
		Apply: func(context.Context, store.Command) (store.Result, error) { return store.Result{}, nil }})
	cases := map[string]struct {
		ip   string
		want int
	}{
		"remote client":   {"192.0.2.7", http.StatusForbidden},
		"loopback client": {"127.0.0.1", http.StatusOK},
		"ipv6 loopback":   {"::1", http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// An in-memory request: the remote address is only a value here.
			var req fasthttp.Request
			req.SetRequestURI("/workers")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 40000}, nil)
			if !admin.Serve(&ctx) || ctx.Response.StatusCode() != tc.want {
				t.Fatalf("status %d, want %d", ctx.Response.StatusCode(), tc.want)
			}
		})
	}
}

func TestAdminServesLoadsAndStatusInTheirShapes(t *testing.T) {
	loads := []adminapi.WorkerLoad{{ID: 3, Worker: "http://127.0.0.1:1", URL: "http://127.0.0.1:1", Role: "regular", Load: 7, LocalLoad: 2, Healthy: true, State: "active"}}
	c := fakeAdmin(t, Config{
		Loads:  func() []adminapi.WorkerLoad { return loads },
		Status: func() any { return map[string]any{"leader": "n1", "term": 4} },
	}, nil)
	want := `{"workers":[{"id":3,"worker":"http://127.0.0.1:1","url":"http://127.0.0.1:1","role":"regular","load":7,"local_load":2,"healthy":true,"state":"active"}]}`
	if r := c.do("GET", "/get_loads", ""); r.body != want {
		t.Fatalf("get_loads = %s\nwant %s", r.body, want)
	}
	if r := c.do("GET", "/cluster/status", ""); r.body != `{"leader":"n1","term":4}` {
		t.Fatalf("cluster/status = %s", r.body)
	}

	bare := fakeAdmin(t, Config{}, nil)
	if r := bare.do("GET", "/get_loads", ""); r.body != `{"workers":[]}` {
		t.Fatalf("get_loads without loads = %s", r.body)
	}
}

func TestAdminClaimsOnlyItsOwnPaths(t *testing.T) {
	c := fakeAdmin(t, Config{}, nil)
	for _, path := range []string{"/v1/completions", "/health", "/workersx", "/metrics"} {
		if r := c.do("GET", path, ""); r.status != http.StatusTeapot {
			t.Errorf("GET %s: status %d, want the fallback's 418", path, r.status)
		}
	}
	r := c.do("PUT", "/workers", "")
	expectStatus(t, r, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "GET, POST" {
		t.Fatalf("Allow = %q", allow)
	}
	expectStatus(t, c.do("POST", "/workers/1/reboot", ""), http.StatusNotFound)
}

// FuzzAdminCreateWorker sends arbitrary bodies to POST /workers: every one
// must be answered 201 with a registered worker, or 400/413 with an
// OpenAI-style error and nothing registered.
func FuzzAdminCreateWorker(f *testing.F) {
	f.Add([]byte(`{"url":"http://w:1","role":"prefill","model":"m","bootstrap_port":1,"labels":{"a":"b"}}`))
	f.Add([]byte(`{"url":"http://w:1","bootstrap_port":-1}`))
	f.Add([]byte(`{"url":"http://w:1"} trailing`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fsm := store.NewFSM()
		admin := New(Config{Registry: fsm.View, Apply: directApply(fsm)})
		var req fasthttp.Request
		req.Header.SetMethod(http.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetRequestURI("/workers")
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
		admin.Serve(&ctx)
		r := reply{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body())}
		switch r.status {
		case http.StatusCreated:
			if fsm.View().Len() != 1 || r.worker(t).ID != 1 {
				t.Fatalf("201 %s but registry holds %d workers", r.body, fsm.View().Len())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			r.apiError(t)
			if fsm.View().Len() != 0 {
				t.Fatalf("%d but a worker was registered", r.status)
			}
		default:
			t.Fatalf("status %d for body %q: %s", r.status, body, r.body)
		}
	})
}

// directApply applies commands to fsm at once, as a one-node cluster would
// after commit.
func directApply(fsm *store.FSM) func(context.Context, store.Command) (store.Result, error) {
	var index uint64
	return func(_ context.Context, cmd store.Command) (store.Result, error) {
		data, err := cmd.Encode()
		if err != nil {
			return store.Result{}, err
		}
		index++
		res := fsm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(store.Result)
		return res, res.Err
	}
}

// TestAdminRefusesARefusedWorkerDestination: the policy is checked on the
// URL alone; nothing is contacted.
func TestAdminRefusesARefusedWorkerDestination(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, n)
	c := serveAdmin(t, New(Config{Registry: n.fsm.View, Apply: n.Apply, AllowWorker: workerurl.HostPolicy{}.Allows}))
	r := c.do("POST", "/workers", `{"url":"http://169.254.169.254:80"}`)
	expectStatus(t, r, http.StatusBadRequest)
	if e := r.apiError(t); !strings.Contains(e.Message, "url") || !strings.Contains(e.Message, "metadata") {
		t.Fatalf("error %+v", e)
	}
	if r := c.do("POST", "/add_worker?url=http://[fd00:ec2::254]:80", ""); r.status != http.StatusBadRequest {
		t.Fatalf("legacy add: %d %s", r.status, r.body)
	}
	if n.fsm.View().Len() != 0 {
		t.Fatal("a refused destination reached the registry")
	}
	expectStatus(t, c.do("POST", "/workers", `{"url":"http://127.0.0.1:8000"}`), http.StatusCreated)
}

func TestAdminFindsAWorkerByURLAsVllmRouterDoes(t *testing.T) {
	c, _ := raftAdmin(t)
	expectStatus(t, c.do("POST", "/workers", `{"url":"http://127.0.0.1:8000/base"}`), http.StatusCreated)
	for _, path := range []string{"/workers/http://127.0.0.1:8000/base", "/workers/http%3A%2F%2F127.0.0.1%3A8000%2Fbase",
		"/workers/" + url.PathEscape("http://127.1:8000/base/")} {
		r := c.do("GET", path, "")
		expectStatus(t, r, http.StatusOK)
		if w := r.worker(t); w.ID != 1 {
			t.Fatalf("%s: %+v", path, w)
		}
	}
	expectStatus(t, c.do("GET", "/workers/http://127.0.0.1:9999", ""), http.StatusNotFound)
	expectStatus(t, c.do("DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A8000%2Fbase", ""), http.StatusOK)
	expectStatus(t, c.do("GET", "/workers/1", ""), http.StatusNotFound)
}
