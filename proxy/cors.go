package proxy

import (
	"bytes"
	"slices"

	"github.com/kvrouter/kvrouter/proxy/wire"
	"github.com/valyala/fasthttp"
)

// CORS, as vllm-router does it: with no --cors-allowed-origins any origin
// may call the API from a browser; with some, only those. It applies to the
// API (inference, models, stored responses), never to the admin API, whose
// writes need a token or a loopback client and a JSON content type.

// apiPath reports whether path belongs to the API that browsers may call.
func apiPath(path []byte) bool {
	return bytes.HasPrefix(path, []byte("/v1/")) || wire.EndpointAt(path) != nil
}

// corsPolicy is the origins that may call the API from a browser
// (--cors-allowed-origins); none allows any.
type corsPolicy struct{ origins []string }

// apply sets the CORS headers of an API request that carries an Origin,
// and with preflight answers a preflight; it reports whether the request
// was answered.
func (c *corsPolicy) apply(ctx *fasthttp.RequestCtx, preflight bool) bool {
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 || !apiPath(ctx.Path()) {
		return false
	}
	allowed := len(c.origins) == 0 || slices.Contains(c.origins, string(origin))
	if allowed {
		h := &ctx.Response.Header
		if len(c.origins) == 0 {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.SetBytesV("Access-Control-Allow-Origin", origin)
			h.Set("Vary", "Origin")
		}
		h.Set("Access-Control-Expose-Headers", "x-request-id")
	}
	if !preflight || !ctx.IsOptions() || len(ctx.Request.Header.Peek("Access-Control-Request-Method")) == 0 {
		return false
	}
	if allowed {
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-ID, X-Session-ID, "+
			"X-API-Key, Anthropic-Version, Anthropic-Beta, Anthropic-Dangerous-Direct-Browser-Access")
		h.Set("Access-Control-Max-Age", "3600")
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return true
}
