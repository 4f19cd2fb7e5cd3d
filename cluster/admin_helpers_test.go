package cluster

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
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
func serveAdmin(t *testing.T, a *admin.Admin) *adminClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !a.Serve(ctx) {
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

// adminRequest runs one in-memory request through admin from a loopback
// client and returns the status.
func adminRequest(a *admin.Admin, method, uri, host, contentType, token, body string, headers ...string) int {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost(host)
	if contentType != "" {
		req.Header.SetContentType(contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	req.SetBodyString(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	a.Serve(&ctx)
	return ctx.Response.StatusCode()
}
