package proxy

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// rawRequest sends req as it is on a fresh connection and reads the answer.
func rawRequest(t *testing.T, url, req string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// The worker gets the path the router routed on and checked the key on,
// not the raw one, which names another route once decoded.
func TestTheWorkerGetsThePathTheRouterApproved(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	body := completion("hello", false)
	for _, target := range []string{"/admin/fault/..%2f..%2fv1/completions", "/v1/./x/../completions", "//v1/completions"} {
		resp := rawRequest(t, r.url, "POST "+target+" HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", target, resp.StatusCode)
		}
		if got := w.LastPath(); got != "/v1/completions" {
			t.Fatalf("%s reached the worker as %q, want /v1/completions", target, got)
		}
	}
}

// The router answers CORS from its own rule: a worker's Access-Control-*
// headers (vLLM allows every origin by default) never reach the client.
func TestTheRouterOwnsCORS(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		e.JSON(200, fakeworker.Completion("w1"), "Access-Control-Allow-Origin: *",
			"Access-Control-Allow-Credentials: true", "access-control-expose-headers: x-secret")
	})
	r := startRouter(t, Config{CORSOrigins: []string{"https://app.example"}}, w)
	for origin, want := range map[string]string{"https://evil.example": "", "https://app.example": "https://app.example", "": ""} {
		req, _ := http.NewRequest("POST", r.url+"/v1/completions", strings.NewReader(completion("x", false)))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("origin %q: status %d", origin, resp.StatusCode)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != want {
			t.Errorf("origin %q got Access-Control-Allow-Origin %q, want %q", origin, got, want)
		}
		if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "" {
			t.Errorf("origin %q got the worker's Access-Control-Allow-Credentials %q", origin, got)
		}
		if got := resp.Header.Get("Access-Control-Expose-Headers"); strings.Contains(got, "x-secret") {
			t.Errorf("origin %q got the worker's Access-Control-Expose-Headers %q", origin, got)
		}
	}
}

// The same holds for a streamed answer.
func TestTheRouterOwnsCORSOnAStream(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		if e.Head(200, "Content-Type: text/event-stream", "Transfer-Encoding: chunked", "Access-Control-Allow-Origin: *") == nil {
			_ = e.EndStream()
		}
	})
	r := startRouter(t, Config{CORSOrigins: []string{"https://app.example"}}, w)
	req, _ := http.NewRequest("POST", r.url+"/v1/completions", strings.NewReader(completion("x", true)))
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Access-Control-Allow-Origin"); resp.StatusCode != 200 || got != "" {
		t.Fatalf("status %d, Access-Control-Allow-Origin %q for a refused origin", resp.StatusCode, got)
	}
}

// Headers a Connection header names are for one hop: the client's never
// reach the worker, the worker's never reach the client.
func TestHeadersNamedInConnectionAreDroppedBothWays(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		e.JSON(200, fakeworker.Completion("w1"), "Connection: keep-alive, X-Worker-Hop", "X-Worker-Hop: internal",
			"X-Worker-End: kept")
	})
	r := startRouter(t, Config{}, w)
	body := completion("x", false)
	resp := rawRequest(t, r.url, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"+
		"Connection: x-client-hop, keep-alive\r\nX-Client-Hop: secret\r\nX-Client-End: kept\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := w.LastHeader()
	if h.Get("X-Client-Hop") != "" || h.Get("X-Client-End") != "kept" {
		t.Errorf("the worker got X-Client-Hop %q and X-Client-End %q", h.Get("X-Client-Hop"), h.Get("X-Client-End"))
	}
	if resp.Header.Get("X-Worker-Hop") != "" || resp.Header.Get("X-Worker-End") != "kept" {
		t.Errorf("the client got X-Worker-Hop %q and X-Worker-End %q", resp.Header.Get("X-Worker-Hop"), resp.Header.Get("X-Worker-End"))
	}
}
