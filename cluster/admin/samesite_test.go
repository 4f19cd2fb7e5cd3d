package admin

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/store"
)

// A page in a browser on the operator's machine is a loopback client: what
// it sends must not change the registry when the admin API has no token.
// The browser marks it (Sec-Fetch-Site, Origin); curl and scripts do not.
func TestAdminWithoutATokenRefusesWhatAWebPageCanSend(t *testing.T) {
	fsm := store.NewFSM()
	admin := New(Config{Registry: fsm.View, Apply: admintest.DirectApply(fsm)})
	add := `{"url":"http://127.0.0.1:9/from-a-page"}`
	page := "http://evil.example"
	cases := []struct {
		name, method, uri, host, contentType string
		headers                              []string
		want                                 int
	}{
		{"a cross-site form as text/plain", "POST", "/workers", "127.0.0.1:8080", "text/plain",
			[]string{"Sec-Fetch-Site", "cross-site", "Origin", page}, http.StatusForbidden},
		{"a form post", "POST", "/workers", "127.0.0.1:8080", "application/x-www-form-urlencoded",
			[]string{"Sec-Fetch-Site", "cross-site", "Origin", page}, http.StatusForbidden},
		{"a page on another port of this host", "POST", "/workers", "127.0.0.1:8080", "application/json",
			[]string{"Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:3000"}, http.StatusForbidden},
		{"an older browser's cross-origin post, Origin only", "POST", "/workers", "localhost:8080", "multipart/form-data; boundary=x",
			[]string{"Origin", page}, http.StatusForbidden},
		{"vllm-router's add_worker from a page", "POST", "/add_worker?url=http://127.0.0.1:9/x", "127.0.0.1:8080", "",
			[]string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"a rebinding page's Host", "POST", "/workers", "evil.example:8080", "application/json",
			[]string{"Sec-Fetch-Site", "same-origin", "Origin", "http://evil.example:8080"}, http.StatusForbidden},
		{"a rebinding page reading", "GET", "/workers", "evil.example", "", nil, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := admintest.Request(admin, tc.method, tc.uri, tc.host, tc.contentType, "", add, tc.headers...); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
			if fsm.View().Len() != 0 {
				t.Fatal("the request changed the registry")
			}
		})
	}
	t.Run("curl, a script and the same origin are served", func(t *testing.T) {
		served := []struct {
			host, contentType string
			headers           []string
		}{
			{"127.0.0.1:8080", "", []string{"User-Agent", "curl/8.14.1", "Accept", "*/*"}},
			{"[::1]:8080", "application/x-www-form-urlencoded", nil}, // curl -d
			{"localhost", "application/json; charset=utf-8", nil},
			{"router.localhost:8080", "text/plain", []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://router.localhost:8080"}},
			{"127.0.0.1:8080", "", []string{"Sec-Fetch-Site", "none"}}, // typed into the address bar
			{"127.0.0.1:8080", "", []string{"Origin", "http://127.0.0.1:8080"}},
			{"", "", nil},
		}
		for i, tc := range served {
			body := fmt.Sprintf(`{"url":"http://127.0.0.1:9/w%d"}`, i)
			if got := admintest.Request(admin, "POST", "/workers", tc.host, tc.contentType, "", body, tc.headers...); got/100 != 2 {
				t.Fatalf("Host %q %v: status %d", tc.host, tc.headers, got)
			}
		}
		if fsm.View().Len() != len(served) {
			t.Fatalf("%d workers registered, want %d", fsm.View().Len(), len(served))
		}
		if got := admintest.Request(admin, "DELETE", "/workers/1", "127.0.0.1:8080", "", "", ""); got != http.StatusOK {
			t.Fatalf("curl -X DELETE /workers/1: status %d", got)
		}
	})
}

func TestAdminWithATokenNeedsNoContentType(t *testing.T) {
	fsm := store.NewFSM()
	admin := New(Config{Token: "s3cret", Registry: fsm.View, Apply: admintest.DirectApply(fsm)})
	if got := admintest.Request(admin, "POST", "/add_worker?url=http://127.0.0.1:9/x", "router.example", "", "s3cret", ""); got != http.StatusOK {
		t.Fatalf("status %d", got)
	}
	if got := admintest.Request(admin, "POST", "/workers", "router.example", "text/plain", "", `{"url":"http://w:1"}`); got != http.StatusUnauthorized {
		t.Fatalf("without the token: status %d", got)
	}
	if fsm.View().Len() != 1 {
		t.Fatalf("%d workers registered, want the one the token allowed", fsm.View().Len())
	}
}
