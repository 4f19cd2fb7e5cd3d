package identity

import (
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/credential"
)

// Keys are the keys clients must present on the inference API
// (--api-keys), kept as their identities (credential.ID, a SHA-256): a
// lookup compares digests of fixed length, so its timing says nothing
// about the keys. The zero Keys holds none.
type Keys struct {
	ids atomic.Pointer[map[credential.ID]struct{}]
}

// Replace installs keys; none turns the check off.
func (k *Keys) Replace(keys []string) {
	set := make(map[credential.ID]struct{}, len(keys))
	for _, key := range keys {
		if key != "" {
			set[credential.IDOf([]byte(key))] = struct{}{}
		}
	}
	k.ids.Store(&set)
}

// Enabled reports whether clients must present a key.
func (k *Keys) Enabled() bool {
	set := k.ids.Load()
	return set != nil && len(*set) > 0
}

// Holds reports whether id is one of the keys.
func (k *Keys) Holds(id credential.ID) bool {
	_, ok := (*k.ids.Load())[id]
	return ok
}
