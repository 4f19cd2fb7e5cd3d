package loadsync

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Errors of the gossip keyring. Match with errors.Is.
var (
	// ErrNoEncryption: the replica started without a gossip key, so it has
	// no keyring. memberlist cannot turn encryption on at run time (the
	// members would stop understanding each other one by one); restart
	// every replica with --gossip-key instead.
	ErrNoEncryption = errors.New("loadsync: gossip is not encrypted (started without a gossip key); no keyring to change")
	// ErrGossipKey: a peer we tried to join cannot read our gossip, or we
	// cannot read its: one side has another key, or no key at all.
	// Retrying does not help, so Join returns it at once and it does not
	// wrap ErrJoin.
	ErrGossipKey = errors.New("loadsync: gossip key mismatch")
)

// Keyring is what the gossip encryption keyring holds: the primary key,
// which encrypts everything this replica sends, and every installed key,
// each of which may decrypt what it receives (the primary among them).
type Keyring struct {
	Primary []byte
	Keys    [][]byte
}

// Keyring returns the installed gossip keys. Safe for concurrent use.
func (g *Gossip) Keyring() (Keyring, error) {
	kr, err := g.ring()
	if err != nil {
		return Keyring{}, err
	}
	return Keyring{Primary: kr.GetPrimaryKey(), Keys: kr.GetKeys()}, nil
}

// InstallKey adds key to the keyring, so that gossip encrypted with it is
// understood; this replica keeps sending with its primary key. The first
// step of a rotation: install the new key on every replica, then UseKey it
// everywhere, then RemoveKey the old one. Installing a key twice is a
// no-op. Safe for concurrent use.
func (g *Gossip) InstallKey(key []byte) error {
	return g.withRing(func(kr *memberlist.Keyring) error { return kr.AddKey(key) })
}

// UseKey makes an installed key the primary one: everything this replica
// sends from now on is encrypted with it. Safe for concurrent use.
func (g *Gossip) UseKey(key []byte) error {
	return g.withRing(func(kr *memberlist.Keyring) error { return kr.UseKey(key) })
}

// RemoveKey drops a key from the keyring; gossip encrypted with it is no
// longer understood. The primary key cannot be removed. Safe for
// concurrent use.
func (g *Gossip) RemoveKey(key []byte) error {
	return g.withRing(func(kr *memberlist.Keyring) error { return kr.RemoveKey(key) })
}

func (g *Gossip) withRing(op func(*memberlist.Keyring) error) error {
	kr, err := g.ring()
	if err != nil {
		return err
	}
	if err := op(kr); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// ring is memberlist's keyring, which it creates from the SecretKey.
func (g *Gossip) ring() (*memberlist.Keyring, error) {
	if g.keyring == nil {
		return nil, ErrNoEncryption
	}
	return g.keyring, nil
}

// keyMismatchTexts are how memberlist (which has no error values for them)
// words a push/pull that failed because the two sides do not share a key:
// both have keys but none in common; the peer encrypts and we do not; we
// encrypt and the peer does not.
var keyMismatchTexts = []string{
	"no installed keys could decrypt the message",
	"remote state is encrypted and encryption is not configured",
	"encryption is configured but remote state is not encrypted",
}

// keyMismatch returns an ErrGossipKey error when err, memberlist's answer
// to a join of addrs, says that the peer and we do not share a gossip key;
// nil otherwise.
func keyMismatch(addrs []string, err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, t := range keyMismatchTexts {
		if strings.Contains(text, t) {
			return fmt.Errorf("%w: joining %s: %s (every replica needs the same --gossip-key; "+
				"during a rotation, the key in use must be installed everywhere)", ErrGossipKey, strings.Join(addrs, ","), t)
		}
	}
	return nil
}
