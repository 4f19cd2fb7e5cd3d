package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

// raftAdmin serves an Admin from cfg backed by a real one-node Raft
// cluster, which sets its Registry and Apply.
func raftAdmin(t *testing.T, cfg Config) (*admintest.Client, *raftnodetest.Node) {
	t.Helper()
	n := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, n.Node)
	cfg.Registry, cfg.Apply = n.FSM.View, n.Apply
	return admintest.Serve(t, New(cfg)), n
}

func TestAdminWorkerLifecycleThroughRaft(t *testing.T) {
	c, n := raftAdmin(t, Config{})
	body := `{"url":"HTTP://W1:8000/","role":"prefill","model":"m","bootstrap_port":8998,"labels":{"zone":"a"}}`
	r := c.Do("POST", "/workers", body)
	admintest.ExpectStatus(t, r, http.StatusCreated)
	w := r.Worker(t)
	if w.ID != 1 || w.URL != "http://w1:8000" || w.Role != store.RolePrefill || w.Model != "m" ||
		w.BootstrapPort != 8998 || w.Labels["zone"] != "a" || w.State != store.StateActive {
		t.Fatalf("created worker = %+v", w)
	}
	if again := c.Do("POST", "/workers", `{"url":"http://w1:8000"}`); again.Status != http.StatusOK || again.Worker(t).ID != 1 {
		t.Fatalf("re-adding: status %d body %s, want 200 with id 1", again.Status, again.Body)
	}

	var list struct{ Workers []store.Worker }
	if err := json.Unmarshal([]byte(c.Do("GET", "/workers", "").Body), &list); err != nil || len(list.Workers) != 1 {
		t.Fatalf("GET /workers = %+v, %v", list, err)
	}

	r = c.Do("POST", "/workers/1/drain", "")
	admintest.ExpectStatus(t, r, http.StatusOK)
	if got, _ := n.FSM.View().Worker(1); r.Worker(t).State != store.StateDraining || got.State != store.StateDraining {
		t.Fatalf("after drain: response %s, registry %+v", r.Body, got)
	}
	admintest.ExpectStatus(t, c.Do("POST", "/workers/1/activate", ""), http.StatusOK)
	if got, _ := n.FSM.View().Worker(1); got.State != store.StateActive {
		t.Fatalf("after activate: %+v", got)
	}

	admintest.ExpectStatus(t, c.Do("DELETE", "/workers/1", ""), http.StatusOK)
	admintest.ExpectStatus(t, c.Do("GET", "/workers/1", ""), http.StatusNotFound)
	r = c.Do("DELETE", "/workers/1", "")
	admintest.ExpectStatus(t, r, http.StatusNotFound)
	if e := r.APIError(t); e.Type != "not_found_error" {
		t.Fatalf("error type %q", e.Type)
	}
}

func TestAdminRefusesInvalidRequestsWith400NamingTheField(t *testing.T) {
	c, n := raftAdmin(t, Config{})
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
			r := c.Do(tc.method, tc.path, tc.body)
			admintest.ExpectStatus(t, r, http.StatusBadRequest)
			if e := r.APIError(t); !strings.Contains(e.Message, tc.mention) || e.Type != "invalid_request_error" {
				t.Fatalf("error %+v does not mention %q", e, tc.mention)
			}
		})
	}
	if n.FSM.View().Len() != 0 {
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
		r := c.Do(tc.method, tc.path, tc.body)
		admintest.ExpectStatus(t, r, http.StatusBadRequest)
		if e := r.APIError(t); !strings.Contains(e.Message, tc.mention) {
			t.Errorf("%s %s: %q does not say %q", tc.method, tc.path, e.Message, tc.mention)
		}
	}
}

func TestAdminReAddWithAnotherRoleIs409(t *testing.T) {
	c, _ := raftAdmin(t, Config{})
	admintest.ExpectStatus(t, c.Do("POST", "/workers", `{"url":"http://w:1","role":"prefill"}`), http.StatusCreated)
	r := c.Do("POST", "/workers", `{"url":"http://w:1","role":"decode"}`)
	admintest.ExpectStatus(t, r, http.StatusConflict)
	if e := r.APIError(t); !strings.Contains(e.Message, "role") {
		t.Fatalf("conflict message %q does not name the role", e.Message)
	}
}

func TestAdminLegacyEndpointsAnswerLikeVllmRouter(t *testing.T) {
	c, _ := raftAdmin(t, Config{})
	r := c.Do("POST", "/add_worker?url=http://w1:8000", "")
	if r.Status != http.StatusOK || r.Body != "Successfully added worker: http://w1:8000" {
		t.Fatalf("add_worker: %d %q", r.Status, r.Body)
	}
	r = c.Do("POST", "/add_worker?url=http://w1:8000", "")
	if r.Status != http.StatusBadRequest || r.Body != "Worker http://w1:8000 already exists" {
		t.Fatalf("second add_worker: %d %q", r.Status, r.Body)
	}
	if r = c.Do("GET", "/list_workers", ""); r.Body != `{"urls":["http://w1:8000"]}` {
		t.Fatalf("list_workers: %d %q", r.Status, r.Body)
	}
	for range 2 { // removing is idempotent, as in vllm-router
		r = c.Do("POST", "/remove_worker?url=http://w1:8000", "")
		if r.Status != http.StatusOK || r.Body != "Successfully removed worker: http://w1:8000" {
			t.Fatalf("remove_worker: %d %q", r.Status, r.Body)
		}
	}
	if r = c.Do("GET", "/list_workers", ""); r.Body != `{"urls":[]}` {
		t.Fatalf("list_workers after removal: %q", r.Body)
	}
	admintest.ExpectStatus(t, c.Do("POST", "/add_worker", ""), http.StatusBadRequest)
	admintest.ExpectStatus(t, c.Do("POST", "/add_worker?url=nope", ""), http.StatusBadRequest)
}

// fakeAdmin serves an Admin whose Apply is fn (nil: writes fail the test),
// over an empty registry.
func fakeAdmin(t *testing.T, cfg Config, fn func(context.Context, store.Command) (store.Result, error)) *admintest.Client {
	t.Helper()
	cfg.Registry = store.NewFSM().View
	cfg.Apply = fn
	if fn == nil {
		cfg.Apply = func(context.Context, store.Command) (store.Result, error) {
			t.Error("unexpected write")
			return store.Result{}, nil
		}
	}
	return admintest.Serve(t, New(cfg))
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
			r := c.Do("POST", "/workers", `{"url":"http://w:1"}`)
			admintest.ExpectStatus(t, r, tc.status)
			if e := r.APIError(t); !strings.Contains(e.Message, tc.mention) {
				t.Fatalf("message %q does not mention %q", e.Message, tc.mention)
			}
			if tc.status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
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
		c.Token = token
		r := c.Do("POST", "/workers", `{"url":"http://w:1"}`)
		admintest.ExpectStatus(t, r, http.StatusUnauthorized)
		if r.Header.Get("WWW-Authenticate") == "" || r.APIError(t).Type != "authentication_error" {
			t.Fatalf("token %q: 401 without challenge or with body %s", token, r.Body)
		}
	}
	if applied {
		t.Fatal("an unauthenticated write was applied")
	}
	c.Token = "s3cret"
	admintest.ExpectStatus(t, c.Do("POST", "/workers", `{"url":"http://w:1"}`), http.StatusCreated)
	admintest.ExpectStatus(t, c.Do("GET", "/workers", ""), http.StatusOK)
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
	loads := []adminapi.WorkerLoad{{ID: 3, Worker: "http://127.0.0.1:1", URL: "http://127.0.0.1:1", Role: "regular", Load: 7, LocalLoad: 2,
		PrefillBacklog: 9000, LocalPrefillBacklog: 4000, Healthy: true, State: "active"}}
	c := fakeAdmin(t, Config{
		Loads:  func() []adminapi.WorkerLoad { return loads },
		Status: func() any { return map[string]any{"leader": "n1", "term": 4} },
	}, nil)
	want := `{"workers":[{"id":3,"worker":"http://127.0.0.1:1","url":"http://127.0.0.1:1","role":"regular","load":7,"local_load":2,"prefill_backlog_bytes":9000,"local_prefill_backlog_bytes":4000,"healthy":true,"state":"active"}]}`
	if r := c.Do("GET", "/get_loads", ""); r.Body != want {
		t.Fatalf("get_loads = %s\nwant %s", r.Body, want)
	}
	if r := c.Do("GET", "/cluster/status", ""); r.Body != `{"leader":"n1","term":4}` {
		t.Fatalf("cluster/status = %s", r.Body)
	}

	bare := fakeAdmin(t, Config{}, nil)
	if r := bare.Do("GET", "/get_loads", ""); r.Body != `{"workers":[]}` {
		t.Fatalf("get_loads without loads = %s", r.Body)
	}
}

func TestAdminClaimsOnlyItsOwnPaths(t *testing.T) {
	c := fakeAdmin(t, Config{}, nil)
	for _, path := range []string{"/v1/completions", "/health", "/workersx", "/metrics"} {
		if r := c.Do("GET", path, ""); r.Status != http.StatusTeapot {
			t.Errorf("GET %s: status %d, want the fallback's 418", path, r.Status)
		}
	}
	r := c.Do("PUT", "/workers", "")
	admintest.ExpectStatus(t, r, http.StatusMethodNotAllowed)
	if allow := r.Header.Get("Allow"); allow != "GET, POST" {
		t.Fatalf("Allow = %q", allow)
	}
	admintest.ExpectStatus(t, c.Do("POST", "/workers/1/reboot", ""), http.StatusNotFound)
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
		admin := New(Config{Registry: fsm.View, Apply: admintest.DirectApply(fsm)})
		var req fasthttp.Request
		req.Header.SetMethod(http.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetRequestURI("/workers")
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
		admin.Serve(&ctx)
		r := admintest.Reply{Status: ctx.Response.StatusCode(), Body: string(ctx.Response.Body())}
		switch r.Status {
		case http.StatusCreated:
			if fsm.View().Len() != 1 || r.Worker(t).ID != 1 {
				t.Fatalf("201 %s but registry holds %d workers", r.Body, fsm.View().Len())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			r.APIError(t)
			if fsm.View().Len() != 0 {
				t.Fatalf("%d but a worker was registered", r.Status)
			}
		default:
			t.Fatalf("status %d for body %q: %s", r.Status, body, r.Body)
		}
	})
}

// TestAdminRefusesARefusedWorkerDestination: the policy is checked on the
// URL alone; nothing is contacted.
func TestAdminRefusesARefusedWorkerDestination(t *testing.T) {
	c, n := raftAdmin(t, Config{AllowWorker: workerurl.HostPolicy{}.Allows})
	r := c.Do("POST", "/workers", `{"url":"http://169.254.169.254:80"}`)
	admintest.ExpectStatus(t, r, http.StatusBadRequest)
	if e := r.APIError(t); !strings.Contains(e.Message, "url") || !strings.Contains(e.Message, "metadata") {
		t.Fatalf("error %+v", e)
	}
	if r := c.Do("POST", "/add_worker?url=http://[fd00:ec2::254]:80", ""); r.Status != http.StatusBadRequest {
		t.Fatalf("legacy add: %d %s", r.Status, r.Body)
	}
	if n.FSM.View().Len() != 0 {
		t.Fatal("a refused destination reached the registry")
	}
	admintest.ExpectStatus(t, c.Do("POST", "/workers", `{"url":"http://127.0.0.1:8000"}`), http.StatusCreated)
}

func TestAdminFindsAWorkerByURLAsVllmRouterDoes(t *testing.T) {
	c, _ := raftAdmin(t, Config{})
	admintest.ExpectStatus(t, c.Do("POST", "/workers", `{"url":"http://127.0.0.1:8000/base"}`), http.StatusCreated)
	for _, path := range []string{"/workers/http://127.0.0.1:8000/base", "/workers/http%3A%2F%2F127.0.0.1%3A8000%2Fbase",
		"/workers/" + url.PathEscape("http://127.1:8000/base/")} {
		r := c.Do("GET", path, "")
		admintest.ExpectStatus(t, r, http.StatusOK)
		if w := r.Worker(t); w.ID != 1 {
			t.Fatalf("%s: %+v", path, w)
		}
	}
	admintest.ExpectStatus(t, c.Do("GET", "/workers/http://127.0.0.1:9999", ""), http.StatusNotFound)
	admintest.ExpectStatus(t, c.Do("DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A8000%2Fbase", ""), http.StatusOK)
	admintest.ExpectStatus(t, c.Do("GET", "/workers/1", ""), http.StatusNotFound)
}
