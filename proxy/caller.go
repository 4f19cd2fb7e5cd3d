package proxy

import (
	"encoding/hex"
	"net"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
)

// caller is who a request says it is, read once at the door from its
// credential (package credential: Authorization: Bearer, or x-api-key, in
// any of their spellings), and what every later step asks: the key check,
// admission's class and tenant, the share of the body budget, the owner of
// a stored response. One reading, so that no two steps see two clients.
type caller struct {
	token []byte        // the credential presented, nil when none (a slice of the request's header)
	id    credential.ID // its identity; zero without one
	// verified: the API takes keys (--api-keys) and this is one of them.
	// Only a verified key has a class, tenants and stored responses of its
	// own: without keys a credential proves nothing.
	verified bool
	// ambiguous: two different credentials, refused as no key at all
	// when the API takes keys.
	ambiguous bool
}

// callerOf reads ctx's caller.
func (d *door) callerOf(ctx *fasthttp.RequestCtx) caller {
	h := &ctx.Request.Header
	token, err := credential.Of(h.Peek(fasthttp.HeaderAuthorization), h.Peek(credential.APIKeyHeader))
	c := caller{token: token, ambiguous: err != nil}
	if token != nil {
		c.id = credential.IDOf(token)
		c.verified = d.keys.enabled() && d.keys.holds(c.id)
	}
	return c
}

// hasKey reports whether the caller presented a credential.
func (c *caller) hasKey() bool { return c.token != nil }

// keyTenant is the tenant of a key that --api-key-tenants names none for:
// "key:" and 12 hex digits of its identity (never the key).
func (c *caller) keyTenant() string { return "key:" + hex.EncodeToString(c.id[:6]) }

// clientOf is who a body's share of the budget is charged to
// (package bodyintake): the key when it is a verified one, else the client's
// address, an IPv6 one by its /64 (a host is given a /64, and can take any
// address of it).
func clientOf(c *caller, ctx *fasthttp.RequestCtx) bodyintake.Client {
	if c.verified {
		return bodyintake.Client{ID: c.id}
	}
	b := bodyintake.Client{Addr: true}
	ip := ctx.RemoteIP()
	if v4 := ip.To4(); v4 != nil {
		copy(b.ID[:], v4)
	} else if v6 := ip.To16(); v6 != nil {
		copy(b.ID[:], v6.Mask(net.CIDRMask(64, 128)))
	}
	return b
}
