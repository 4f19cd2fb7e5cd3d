// Package admintest serves an admin API on a loopback port and talks to it
// as an operator's client does, for the tests of the admin API itself and
// of the replicas that mount it. Only tests may import it: a check in this
// package refuses a product package that does.
package admintest

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

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// Handler is the admin API as a server mounts it: Serve answers the
// requests it claims and reports whether it claimed this one. *admin.Admin
// is one; taking the interface lets the admin package's own tests use this
// package without an import cycle.
type Handler interface {
	Serve(ctx *fasthttp.RequestCtx) bool
}

// RequestTimeout bounds each request a Client sends; a replica under -race
// on a busy machine can take seconds to answer one that waits on Raft.
const RequestTimeout = 20 * time.Second

// Client sends requests to an admin API at a base URL and fails its test
// on a transport error. Token, when set, goes in every request's
// Authorization header. A Client is not safe for concurrent use when Token
// changes.
type Client struct {
	t     testing.TB
	base  string
	Token string
	http  *http.Client
}

// NewClient is a Client of the admin API at base ("http://host:port")
// sending through hc.
func NewClient(t testing.TB, base string, hc *http.Client) *Client {
	return &Client{t: t, base: base, http: hc}
}

// Serve serves h on 127.0.0.1 behind a fallback that answers 418 for the
// paths h declines, so a test can see which paths it claims, until the test
// ends; it returns a Client of it that opens a connection per request.
func Serve(t testing.TB, h Handler) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !h.Serve(ctx) {
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
	return NewClient(t, "http://"+ln.Addr().String(),
		&http.Client{Timeout: RequestTimeout, Transport: &http.Transport{DisableKeepAlives: true}})
}

// URL is the base URL the Client sends to ("http://host:port").
func (c *Client) URL() string { return c.base }

// Reply is one response, read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends method path with body (as JSON unless a GET) and reads the
// reply.
func (c *Client) Do(method, path, body string) Reply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
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
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(data)}
}

// Worker decodes the body as one registry worker.
func (r Reply) Worker(t testing.TB) store.Worker {
	t.Helper()
	var w store.Worker
	if err := json.Unmarshal([]byte(r.Body), &w); err != nil {
		t.Fatalf("decode worker from %q: %v", r.Body, err)
	}
	return w
}

// APIError decodes an OpenAI-style error body, failing the test when the
// body is not one or its code is not the status.
func (r Reply) APIError(t testing.TB) adminapi.ErrorDetail {
	t.Helper()
	var b adminapi.ErrorBody
	if err := json.Unmarshal([]byte(r.Body), &b); err != nil || b.Error.Code != r.Status {
		t.Fatalf("error body %q (status %d) is not OpenAI-style: %v", r.Body, r.Status, err)
	}
	return b.Error
}

// ExpectStatus fails the test, showing the body, unless r has status want.
func ExpectStatus(t testing.TB, r Reply, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body %s", r.Status, want, r.Body)
	}
}

// DirectApply applies commands to fsm at once, as a one-node cluster would
// after commit: an admin API's Apply without Raft.
func DirectApply(fsm *store.FSM) func(context.Context, store.Command) (store.Result, error) {
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

// Request runs one in-memory request through h as if from a loopback
// client and returns the status: for what a browser sends (Host, Origin,
// Sec-Fetch-*), which an http.Client would not let a test set freely.
// headers are name, value pairs.
func Request(h Handler, method, uri, host, contentType, token, body string, headers ...string) int {
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
	h.Serve(&ctx)
	return ctx.Response.StatusCode()
}
