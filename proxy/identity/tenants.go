package identity

import (
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// A tenant is who fairness is between (admission's deficit round robin,
// --tenant-max-inflight). With --api-keys it is decided by the key, never
// by what a request says of itself: a key's tenants are the ones
// --api-key-tenants gives it (several keys may share one, an organisation
// with many keys), and a tenant header may choose among them, as a gateway
// that holds one key for several teams does; naming any other tenant is a
// 403. Otherwise one key could make another key's tenant wait, or name a
// new tenant per request and pass --tenant-max-inflight. Without keys a
// request is nobody in particular, and the header is taken as sent.

// Tenants resolves a request's tenant.
type Tenants struct {
	header string                     // --tenant-header; "" for none
	byKey  map[credential.ID][]string // --api-key-tenants, the key's own first
}

// NewTenants resolves tenants from the request header header (--tenant-header,
// "" for none) and the tenants of each key (--api-key-tenants).
func NewTenants(header string, tenants map[string][]string) Tenants {
	t := Tenants{header: header, byKey: map[credential.ID][]string{}}
	for key, names := range tenants {
		t.byKey[credential.IDOf([]byte(key))] = names
	}
	return t
}

// Of is the tenant of a request with headers h from who (see above): a
// tenant header too long or not printable is a 400, a tenant the caller's
// key may not name a 403.
func (t Tenants) Of(h *fasthttp.RequestHeader, who *Caller) (string, error) {
	named, err := t.named(h)
	if err != nil || !who.Verified {
		return unkeyedTenant(named, who), err
	}
	own := t.byKey[who.ID]
	switch {
	case named == "" && len(own) > 0:
		return own[0], nil
	case named == "":
		return who.KeyTenant(), nil
	case slices.Contains(own, named):
		return named, nil
	}
	return "", failure.Errorf(failure.ErrForbidden, "%s: this API key may not name the tenant %q%s", t.header, named, mayName(own))
}

// unkeyedTenant is the tenant of a request the API takes without a key:
// the header's, else its credential's, else "anonymous".
func unkeyedTenant(named string, who *Caller) string {
	switch {
	case named != "":
		return named
	case who.HasKey():
		return who.KeyTenant()
	}
	return "anonymous"
}

// mayName says which tenants a key may name, for its 403.
func mayName(own []string) string {
	if len(own) == 0 {
		return " (--api-key-tenants gives it none)"
	}
	return " (--api-key-tenants gives it " + strings.Join(own, ", ") + ")"
}

// named is the tenant the request's header names, "" when none; a value
// too long or not printable is a 400.
func (t Tenants) named(h *fasthttp.RequestHeader) (string, error) {
	if t.header == "" {
		return "", nil
	}
	v := h.Peek(t.header)
	if len(v) == 0 {
		return "", nil
	}
	if !admission.ValidTenantName(v) {
		return "", failure.Errorf(failure.ErrBadRequest, "%s: a tenant is at most %d letters, digits and . _ : -", t.header, admission.MaxTenantNameBytes)
	}
	return string(v), nil
}
