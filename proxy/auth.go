package proxy

import (
	"bytes"
	"crypto/sha256"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// apiKeys are the bearer keys clients must present on the inference API
// (--api-keys). They are kept as SHA-256 digests: a lookup compares digests
// of fixed length, so its timing says nothing about the keys.
type apiKeys struct {
	digests atomic.Pointer[map[[32]byte]struct{}]
}

// replace installs keys; none turns the check off.
func (k *apiKeys) replace(keys []string) {
	set := make(map[[32]byte]struct{}, len(keys))
	for _, key := range keys {
		if key != "" {
			set[sha256.Sum256([]byte(key))] = struct{}{}
		}
	}
	k.digests.Store(&set)
}

// enabled reports whether clients must present a key.
func (k *apiKeys) enabled() bool {
	set := k.digests.Load()
	return set != nil && len(*set) > 0
}

// allows reports whether an Authorization header carries one of the keys.
func (k *apiKeys) allows(authorization []byte) bool {
	token, ok := bearerToken(authorization)
	if !ok {
		return false
	}
	_, ok = (*k.digests.Load())[sha256.Sum256(token)]
	return ok
}

// bearerToken reads "Bearer <token>"; the scheme is case-insensitive (RFC
// 9110, 11.1), as on the admin API.
func bearerToken(authorization []byte) ([]byte, bool) {
	const scheme = "bearer "
	if len(authorization) <= len(scheme) || !bytes.EqualFold(authorization[:len(scheme)], []byte(scheme)) {
		return nil, false
	}
	token := bytes.TrimSpace(authorization[len(scheme):])
	return token, len(token) > 0
}

// SetAPIKeys replaces the keys clients must present (on SIGHUP, say); none
// turns the check off.
func (p *Proxy) SetAPIKeys(keys []string) { p.keys.replace(keys) }

// AdminCredential is the admin API's token, as /metrics takes it in place
// of an API key.
type AdminCredential interface {
	// HasToken reports whether the admin API has a token (--admin-token).
	HasToken() bool
	// CarriesToken reports whether an Authorization header carries it.
	CarriesToken(authorization []byte) bool
}

// mayUse reports whether ctx's request carries what a route of this
// access needs.
func (p *Proxy) mayUse(ctx *fasthttp.RequestCtx, a access) bool {
	authorization := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	switch a {
	case open:
		return true
	case keyedOrAdmin:
		admin := p.deps.AdminToken
		if admin != nil && admin.HasToken() && admin.CarriesToken(authorization) {
			return true
		}
		if !p.keys.enabled() {
			return admin == nil || !admin.HasToken()
		}
	}
	return !p.keys.enabled() || p.keys.allows(authorization)
}
