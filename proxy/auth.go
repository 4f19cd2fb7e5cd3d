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
	token, ok := bytes.CutPrefix(authorization, []byte("Bearer "))
	if !ok || len(token) == 0 {
		return false
	}
	_, ok = (*k.digests.Load())[sha256.Sum256(token)]
	return ok
}

// SetAPIKeys replaces the keys clients must present (on SIGHUP, say); none
// turns the check off.
func (p *Proxy) SetAPIKeys(keys []string) { p.keys.replace(keys) }

// authorized checks a client's key when keys are required, answering 401
// when it has none or another.
func (p *Proxy) authorized(ctx *fasthttp.RequestCtx) bool {
	if !p.keys.enabled() || p.keys.allows(ctx.Request.Header.Peek("Authorization")) {
		return true
	}
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="kvrouter"`)
	writeErrorStatus(ctx, fasthttp.StatusUnauthorized, "invalid_request_error",
		"missing or invalid API key: send Authorization: Bearer <key>")
	return false
}
