// Package credential reads the credential a client presents, the one way
// every part of the router reads it: the door's key check, admission's
// class and tenant, the owner of a stored response, the share of the body
// budget a client may hold, and the admin API's token. Two readers that
// disagree on a spelling are two identities for one key: "bearer K" passed
// the door and lost the key's class at admission, "Bearer  K" was a tenant
// of its own. Here a key has one canonical form, whatever its spelling.
package credential

import (
	"bytes"
	"crypto/sha256"
	"errors"
)

// APIKeyHeader is the header Anthropic's API takes the key in (its SDKs
// send x-api-key, not Authorization).
const APIKeyHeader = "x-api-key"

// ErrAmbiguous: a request presents two different credentials, one in
// Authorization and another in x-api-key. Neither is taken: a reader that
// preferred the other one would see another client.
var ErrAmbiguous = errors.New("two different credentials, in Authorization and in x-api-key")

// Bearer reads an Authorization value "Bearer <token>": the scheme in any
// case (RFC 9110, 11.1), then one or more spaces or tabs, then the token,
// which has no white space or control character in it (RFC 6750's
// b64token, read leniently: a key may use any other byte). ok is false for
// any other value.
func Bearer(authorization []byte) (token []byte, ok bool) {
	const scheme = "bearer"
	v := bytes.TrimSpace(authorization)
	if len(v) <= len(scheme) || !bytes.EqualFold(v[:len(scheme)], []byte(scheme)) || !isBlank(v[len(scheme)]) {
		return nil, false
	}
	return canonical(v[len(scheme):])
}

// Of reads a request's credential from its Authorization header (Bearer,
// as Bearer reads it) and its x-api-key header (the key alone). token is
// nil when it presents none; err is ErrAmbiguous when the two headers
// carry different keys. A value neither reader takes (Basic credentials,
// a bearer without a token) is no credential.
func Of(authorization, apiKey []byte) (token []byte, err error) {
	bearer, hasBearer := Bearer(authorization)
	key, hasKey := canonical(apiKey)
	switch {
	case hasBearer && hasKey && !bytes.Equal(bearer, key):
		return nil, ErrAmbiguous
	case hasBearer:
		return bearer, nil
	case hasKey:
		return key, nil
	}
	return nil, nil
}

// canonical is the token in v, less the white space around it, or false
// when there is none or it holds white space or a control character.
func canonical(v []byte) ([]byte, bool) {
	v = bytes.TrimFunc(v, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(v) == 0 {
		return nil, false
	}
	for _, c := range v {
		if c <= ' ' || c == 0x7f {
			return nil, false
		}
	}
	return v, true
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// ID is a key's identity: the SHA-256 of its canonical form. Lookups
// compare IDs of fixed length, so their timing says nothing about a key,
// and an ID names a key in memory without holding the key.
type ID [sha256.Size]byte

// IDOf is token's identity.
func IDOf(token []byte) ID { return sha256.Sum256(token) }
