package proxy

import (
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/credential"
)

// apiKeys are the keys clients must present on the inference API
// (--api-keys), kept as their identities (credential.ID, a SHA-256): a
// lookup compares digests of fixed length, so its timing says nothing
// about the keys.
type apiKeys struct {
	ids atomic.Pointer[map[credential.ID]struct{}]
}

// replace installs keys; none turns the check off.
func (k *apiKeys) replace(keys []string) {
	set := make(map[credential.ID]struct{}, len(keys))
	for _, key := range keys {
		if key != "" {
			set[credential.IDOf([]byte(key))] = struct{}{}
		}
	}
	k.ids.Store(&set)
}

// enabled reports whether clients must present a key.
func (k *apiKeys) enabled() bool {
	set := k.ids.Load()
	return set != nil && len(*set) > 0
}

// holds reports whether id is one of the keys.
func (k *apiKeys) holds(id credential.ID) bool {
	_, ok := (*k.ids.Load())[id]
	return ok
}

// SetAPIKeys replaces the keys clients must present (on SIGHUP, say); none
// turns the check off.
func (p *Proxy) SetAPIKeys(keys []string) { p.door.keys.replace(keys) }

// AdminCredential is the admin API's token, as /metrics takes it in place
// of an API key.
type AdminCredential interface {
	// HasToken reports whether the admin API has a token (--admin-token).
	HasToken() bool
	// IsToken reports whether a credential (as package credential reads
	// it) is that token.
	IsToken(token []byte) bool
}

// mayUse reports whether a request of caller c carries what a route of
// this access needs.
func (d *door) mayUse(c *caller, a access) bool {
	switch a {
	case open:
		return true
	case keyedOrAdmin:
		admin := d.admin
		if admin != nil && admin.HasToken() && c.token != nil && admin.IsToken(c.token) {
			return true
		}
		if !d.keys.enabled() {
			return admin == nil || !admin.HasToken()
		}
	}
	return !d.keys.enabled() || c.verified
}
