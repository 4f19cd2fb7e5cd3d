package cluster

import (
	"net"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/store"
)

// adminRequest runs one in-memory request through admin from a loopback
// client and returns the status.
func adminRequest(admin *Admin, method, uri, host, contentType, token, body string) int {
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
	req.SetBodyString(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	admin.Serve(&ctx)
	return ctx.Response.StatusCode()
}

// A page in a browser on the operator's machine is a loopback client: what
// it can send without asking the server first must not change the
// registry when the admin API has no token.
func TestAdminWithoutATokenRefusesWhatAWebPageCanSend(t *testing.T) {
	fsm := store.NewFSM()
	admin := NewAdmin(AdminConfig{Registry: fsm.View, Apply: directApply(fsm)})
	add := `{"url":"http://127.0.0.1:9/from-a-page"}`
	cases := []struct {
		name, method, uri, host, contentType string
		want                                 int
	}{
		{"a cross-site form as text/plain", "POST", "/workers", "127.0.0.1:8080", "text/plain", http.StatusUnsupportedMediaType},
		{"a form post", "POST", "/workers", "127.0.0.1:8080", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"a multipart form", "POST", "/workers", "localhost:8080", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"a body without a Content-Type", "POST", "/workers", "127.0.0.1:8080", "", http.StatusUnsupportedMediaType},
		{"vllm-router's add_worker as text/plain", "POST", "/add_worker?url=http://127.0.0.1:9/x", "127.0.0.1:8080", "text/plain", http.StatusUnsupportedMediaType},
		{"a rebinding page's Host", "POST", "/workers", "evil.example:8080", "application/json", http.StatusForbidden},
		{"a rebinding page reading", "GET", "/workers", "evil.example", "", http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := adminRequest(admin, tc.method, tc.uri, tc.host, tc.contentType, "", add); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
			if fsm.View().Len() != 0 {
				t.Fatal("the request changed the registry")
			}
		})
	}
	t.Run("a client that says JSON is served", func(t *testing.T) {
		for _, host := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost", "router.localhost:8080", ""} {
			if got := adminRequest(admin, "POST", "/workers", host, "application/json; charset=utf-8", "", add); got/100 != 2 {
				t.Fatalf("Host %q: status %d", host, got)
			}
		}
		if fsm.View().Len() != 1 {
			t.Fatalf("%d workers registered, want 1", fsm.View().Len())
		}
	})
}

func TestAdminWithATokenNeedsNoContentType(t *testing.T) {
	fsm := store.NewFSM()
	admin := NewAdmin(AdminConfig{Token: "s3cret", Registry: fsm.View, Apply: directApply(fsm)})
	if got := adminRequest(admin, "POST", "/add_worker?url=http://127.0.0.1:9/x", "router.example", "", "s3cret", ""); got != http.StatusOK {
		t.Fatalf("status %d", got)
	}
	if got := adminRequest(admin, "POST", "/workers", "router.example", "text/plain", "", `{"url":"http://w:1"}`); got != http.StatusUnauthorized {
		t.Fatalf("without the token: status %d", got)
	}
	if fsm.View().Len() != 1 {
		t.Fatalf("%d workers registered, want the one the token allowed", fsm.View().Len())
	}
}
