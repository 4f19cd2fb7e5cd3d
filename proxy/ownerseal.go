package proxy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"

	"github.com/kvrouter/kvrouter/internal/credential"
)

// The owner of a stored response is sealed with a MAC that only the
// router tier can make: a replica that did not relay a response finds its
// worker by asking the workers, and must not take a worker's word for
// whose it is. A fingerprint of the key would not do: a worker sees it in
// every request it is sent, and could show it with any response id asked
// of it, become that response's owner, serve its own answer and receive
// the key's next turn. The seal is an HMAC over the response id (which the
// router chooses, vLLM's request_id) and the key's identity, under a
// secret the replicas share: derived from the gossip key, which a tier
// beyond loopback must have, every key of its keyring checked (a rotation
// does not orphan what the old key sealed until the old key is removed).
// Without a gossip key a replica seals with a secret of its own, and a
// response is found only through the replica that relayed it (the others
// answer 404: they fail closed).

// sealBytes is the length of a seal, in bytes before hex.
const sealBytes = 16

// sealLabel keeps the seal's key apart from anything else derived from the
// same secret (the gossip key encrypts the gossip).
const sealLabel = "kvrouter stored response owner v1"

// ownerSeal makes and checks seals.
type ownerSeal struct {
	// secrets are the tier's shared secrets, the one to seal with first;
	// nil or none: own.
	secrets func() [][]byte
	own     []byte // this replica's own secret
}

func newOwnerSeal(secrets func() [][]byte) *ownerSeal {
	own := make([]byte, 32)
	_, _ = rand.Read(own) // crypto/rand does not fail
	return &ownerSeal{secrets: secrets, own: own}
}

// keys are the MAC keys, the one to seal with first.
func (s *ownerSeal) keys() [][]byte {
	var secrets [][]byte
	if s.secrets != nil {
		secrets = s.secrets()
	}
	if len(secrets) == 0 {
		secrets = [][]byte{s.own}
	}
	keys := make([][]byte, len(secrets))
	for i, secret := range secrets {
		keys[i] = mac(secret, []byte(sealLabel))
	}
	return keys
}

// seal is the seal of response id for key (the zero ID: no key), as hex.
func (s *ownerSeal) seal(id string, key credential.ID) string {
	return hex.EncodeToString(sealWith(s.keys()[0], id, key))
}

// holds reports whether seal (hex, as a worker showed it) is the seal of
// response id for key under any of the keys.
func (s *ownerSeal) holds(seal []byte, id string, key credential.ID) bool {
	got := make([]byte, sealBytes)
	if len(seal) != 2*sealBytes {
		return false
	}
	if _, err := hex.Decode(got, seal); err != nil {
		return false
	}
	for _, k := range s.keys() {
		if hmac.Equal(got, sealWith(k, id, key)) {
			return true
		}
	}
	return false
}

func sealWith(k []byte, id string, key credential.ID) []byte {
	msg := make([]byte, 0, len(id)+1+len(key))
	msg = append(append(append(msg, id...), 0), key[:]...)
	return mac(k, msg)[:sealBytes]
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// newResponseID is an id for a response the router asks an engine to make
// (vLLM's request_id): resp_ and 128 random bits, which a client cannot
// choose, so it cannot be another's.
func newResponseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}
