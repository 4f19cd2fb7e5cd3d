package admin

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
)

// sameSite refuses, on the admin API without --admin-token, the requests a
// web page open in a browser on this host could make. The loopback rule
// does not stop such a page: the browser is a loopback client.
//
//   - A browser marks every request a page makes with Sec-Fetch-Site (all
//     current browsers) and a cross-origin one with Origin. A write that a
//     browser says came from another site or origin is refused, as Go's
//     net/http.CrossOriginProtection judges it: Sec-Fetch-Site same-origin
//     or none passes, any other value is refused; without it, an Origin
//     whose host is not the request's Host is refused; with neither the
//     request is not a page's (curl, scripts, the router's own CLI) and
//     passes. A DELETE or PUT from a page needs a CORS preflight first,
//     which this API never grants.
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
	if err := crossOrigin.Check(browserMarks(ctx)); err != nil {
		return &statusError{http.StatusForbidden, "permission_error",
			"without --admin-token the admin API refuses writes a browser sent from another site or origin (" +
				err.Error() + "); set --admin-token to call it from a page"}
	}
	return nil
}

// crossOrigin is the standard library's judgement of a request's browser
// marks, with no origin trusted beyond the request's own.
var crossOrigin = http.NewCrossOriginProtection()

// browserMarks is what CrossOriginProtection reads of a request: its
// method, Host, Sec-Fetch-Site and Origin.
func browserMarks(ctx *fasthttp.RequestCtx) *http.Request {
	h := http.Header{}
	for _, name := range []string{"Sec-Fetch-Site", "Origin"} {
		if v := ctx.Request.Header.Peek(name); len(v) > 0 {
			h.Set(name, string(v))
		}
	}
	return &http.Request{Method: string(ctx.Method()), Host: string(ctx.Host()), Header: h}
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
