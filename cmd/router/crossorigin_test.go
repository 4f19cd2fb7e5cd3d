package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// countingWorker is a loopback worker that answers health checks and
// counts the prefix-cache flushes it is asked for.
func countingWorker(t *testing.T) (url string, flushes *atomic.Int64) {
	t.Helper()
	flushes = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flush_cache":
			flushes.Add(1)
		case "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m"}]}`))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), flushes
}

// curlRequest sends what `curl -X METHOD http://addr/path` sends (no body,
// no Content-Type) and returns the status.
func curlRequest(t *testing.T, addr, method, path string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: curl/8.14.1\r\nAccept: */*\r\n\r\n", method, path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("curl -X %s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// registeredURLs lists the registry's worker URLs.
func registeredURLs(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + "/list_workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ URLs []string }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list.URLs
}

// Without --admin-token, the admin writes vllm-router users script with
// curl work from loopback, and the same writes from a page of another
// origin in a real (headless) Chromium on this host change nothing.
func TestAdminWritesFromCurlPassAndFromAnotherOriginDoNot(t *testing.T) {
	routerBin, _ := binaries(t)
	ctx := browser(t)
	worker, flushes := countingWorker(t)
	base := startRouterProcess(t, routerBin, "--worker-urls", worker)
	addr := strings.TrimPrefix(base, "http://")

	if got := curlRequest(t, addr, http.MethodPost, "/flush_cache"); got != http.StatusOK || flushes.Load() != 1 {
		t.Fatalf("curl -X POST /flush_cache: %d, %d flushes; want 200 and one", got, flushes.Load())
	}

	// A page on another port of this host (same-site, cross-origin) and one
	// on localhost (cross-site) each try every write a page can send.
	page := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`<!doctype html><title>elsewhere</title><body>elsewhere</body>`))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = page.Serve(ln) }()
	t.Cleanup(func() { _ = page.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	attack := fmt.Sprintf(`(async () => {
		const r = %q, out = [];
		const tries = [
			["POST /flush_cache", r + "/flush_cache", {method: "POST"}],
			["POST /flush_cache no-cors", r + "/flush_cache", {method: "POST", mode: "no-cors"}],
			["POST /flush_cache text/plain", r + "/flush_cache", {method: "POST", mode: "no-cors", body: "x", headers: {"Content-Type": "text/plain"}}],
			["POST /add_worker", r + "/add_worker?url=http://127.0.0.1:9/from-a-page", {method: "POST", mode: "no-cors"}],
			["DELETE /workers/1", r + "/workers/1", {method: "DELETE"}],
		];
		for (const [name, url, init] of tries) {
			try { const resp = await fetch(url, init); out.push(name + ": " + resp.status); }
			catch (e) { out.push(name + ": " + e.message); }
		}
		return out.join("; ");
	})()`, base)
	for _, origin := range []string{"http://127.0.0.1:" + port, "http://localhost:" + port} {
		run, cancel := context.WithTimeout(ctx, 60*time.Second)
		if err := chromedp.Do(run, chromedp.Navigate(origin+"/")); err != nil {
			cancel()
			t.Fatalf("loading the page at %s: %v", origin, err)
		}
		seen, err := chromedp.Run(run, chromedp.Evaluate[string](attack, chromedp.EvalAwaitPromise))
		if err != nil {
			cancel()
			t.Fatalf("the page at %s: %v", origin, err)
		}
		t.Logf("from %s: %s", origin, seen)
		// A form is sent as a navigation, whose answer the tab then shows.
		form := fmt.Sprintf(`(() => { const f = document.createElement("form"); f.method = "POST";
			f.action = %q; document.body.appendChild(f); f.submit(); return true; })()`,
			base+"/add_worker?url=http://127.0.0.1:9/from-a-form")
		if _, err := chromedp.Run(run, chromedp.Evaluate[bool](form)); err != nil {
			cancel()
			t.Fatal(err)
		}
		shown, err := shownAt(run, base)
		cancel()
		if err != nil || !strings.Contains(shown, "permission_error") {
			t.Fatalf("the form from %s: %q %v, want the router's 403", origin, shown, err)
		}
	}
	if n := flushes.Load(); n != 1 {
		t.Fatalf("%d flushes after the pages' tries, want only curl's one", n)
	}
	if urls := registeredURLs(t, base); len(urls) != 1 || urls[0] != worker {
		t.Fatalf("the registry after the pages' tries: %q, want only %s", urls, worker)
	}

	// The router's own page, same-origin, may write: the browser's requests
	// do reach the router, and the rule tells them apart.
	run, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(run, chromedp.Navigate(base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(run, chromedp.Evaluate[int](`fetch("/flush_cache", {method: "POST"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusOK || flushes.Load() != 2 {
		t.Fatalf("a same-origin POST /flush_cache: %d %v, %d flushes; want 200 and a second flush", status, err, flushes.Load())
	}

	if got := curlRequest(t, addr, http.MethodDelete, "/workers/1"); got != http.StatusOK {
		t.Fatalf("curl -X DELETE /workers/1: %d, want 200", got)
	}
	if urls := registeredURLs(t, base); len(urls) != 0 {
		t.Fatalf("after curl -X DELETE: %q", urls)
	}
}

// shownAt waits until the tab shows a page of base (the navigation a form
// made) and returns its text. The evaluation fails while the old page is
// torn down, so it is tried again until ctx ends.
func shownAt(ctx context.Context, base string) (string, error) {
	probe := fmt.Sprintf(`location.href.startsWith(%q) && document.readyState === "complete" ? document.body.innerText : ""`, base)
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](probe))
		if err == nil && text != "" {
			return text, nil
		}
		select {
		case <-ctx.Done():
			return text, fmt.Errorf("the tab never showed a page of %s: %v", base, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
