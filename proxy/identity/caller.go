package identity

import (
	"encoding/hex"
	"net"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
)

// Caller is who a request says it is, read once at the door from its
// credential, and what every later step asks: the key check, admission's
// class and tenant, the share of the body budget, the owner of a stored
// response. One reading, so that no two steps see two clients.
type Caller struct {
	Token []byte        // the credential presented, nil when none (a slice of the request's header)
	ID    credential.ID // its identity; zero without one
	// Verified: the API takes keys (--api-keys) and this is one of them.
	// Only a verified key has a class, tenants and stored responses of its
	// own: without keys a credential proves nothing.
	Verified bool
	// Ambiguous: two different credentials, refused as no key at all
	// when the API takes keys.
	Ambiguous bool
}

// CallerOf reads the caller of a request with headers h.
func (k *Keys) CallerOf(h *fasthttp.RequestHeader) Caller {
	token, err := credential.Of(h.Peek(fasthttp.HeaderAuthorization), h.Peek(credential.APIKeyHeader))
	c := Caller{Token: token, Ambiguous: err != nil}
	if token != nil {
		c.ID = credential.IDOf(token)
		c.Verified = k.Enabled() && k.Holds(c.ID)
	}
	return c
}

// HasKey reports whether the caller presented a credential.
func (c *Caller) HasKey() bool { return c.Token != nil }

// KeyTenant is the tenant of a key that --api-key-tenants names none for:
// "key:" and 12 hex digits of its identity (never the key).
func (c *Caller) KeyTenant() string { return "key:" + hex.EncodeToString(c.ID[:6]) }

// ClientOf is who a body's share of the budget is charged to
// (package bodyintake): the key when it is a verified one, else the client's
// address ip, an IPv6 one by its /64 (a host is given a /64, and can take
// any address of it).
func ClientOf(c *Caller, ip net.IP) bodyintake.Client {
	if c.Verified {
		return bodyintake.Client{ID: c.ID}
	}
	b := bodyintake.Client{Addr: true}
	if v4 := ip.To4(); v4 != nil {
		copy(b.ID[:], v4)
	} else if v6 := ip.To16(); v6 != nil {
		copy(b.ID[:], v6.Mask(net.CIDRMask(64, 128)))
	}
	return b
}
