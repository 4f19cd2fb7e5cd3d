package cluster

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
)

// sameSite refuses, on the admin API without --admin-token, the requests a
// web page open in a browser on this host could make. The loopback rule
// does not stop such a page: the browser is a loopback client.
//
//   - A cross-site page may send a POST without asking first only with a
//     "simple" Content-Type (text/plain, a form encoding) or none. So every
//     admin request but GET and HEAD must say application/json, for which a
//     browser asks first (a CORS preflight), and this API never agrees.
//   - A page whose owner points its host name at 127.0.0.1 (DNS rebinding)
//     is same-origin and may send anything, but its Host header still names
//     the page's site. So the Host must be a loopback address or localhost.
//
// With a token none of this is needed: a page cannot attach the token, and
// a browser never adds it on its own.
func sameSite(ctx *fasthttp.RequestCtx) error {
	if host := string(ctx.Host()); !loopbackHost(host) {
		return &statusError{http.StatusForbidden, "permission_error", fmt.Sprintf(
			"Host %q is not a loopback name; without --admin-token the admin API answers only requests to "+
				"127.0.0.1, [::1] or localhost (a web page may have re-pointed its own name at this host)", host)}
	}
	if ctx.IsGet() || ctx.IsHead() {
		return nil
	}
	if !isJSON(string(ctx.Request.Header.ContentType())) {
		return &statusError{http.StatusUnsupportedMediaType, "invalid_request_error",
			"without --admin-token, admin writes need Content-Type: application/json " +
				"(a web page cannot send that cross-site without the browser asking first)"}
	}
	return nil
}

// loopbackHost reports whether a Host header names this host's loopback:
// a loopback IP, localhost or a name under .localhost (which browsers
// resolve to loopback themselves, RFC 6761). An empty Host (HTTP/1.0, no
// browser) passes.
func loopbackHost(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	host = strings.ToLower(host)
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// isJSON reports whether a Content-Type is application/json (parameters
// such as charset allowed).
func isJSON(contentType string) bool {
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && media == "application/json"
}
