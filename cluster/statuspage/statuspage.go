package statuspage

import (
	"embed"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/valyala/fasthttp"
)

//go:embed static
var files embed.FS

// Prefix is the path the page lives under.
const Prefix = "/ui"

// securityHeaders go with every answer of the page: no framing (a page
// elsewhere cannot overlay it to steer the operator's clicks), no script,
// style or fetch from anywhere but this origin, no sniffing of types.
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"},
	{"X-Frame-Options", "DENY"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
	{"Cache-Control", "no-cache"},
}

// Owns reports whether path belongs to the page: /ui and what is under /ui/.
func Owns(p string) bool { return p == Prefix || strings.HasPrefix(p, Prefix+"/") }

// Serve answers a GET or HEAD of one of the page's files (/ui and /ui/ are
// its index.html); anything else under /ui is a 404, another method a 405.
func Serve(ctx *fasthttp.RequestCtx) {
	for _, h := range securityHeaders {
		ctx.Response.Header.Set(h[0], h[1])
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		ctx.Error("method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(string(ctx.Path()), Prefix)
	if name == "" || name == "/" {
		name = "/index.html"
	}
	body, err := files.ReadFile("static" + path.Clean(name))
	if err != nil {
		ctx.Error("no such file of the status page", http.StatusNotFound)
		return
	}
	ctx.SetContentType(contentType(name))
	ctx.SetBody(body)
}

func contentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}
