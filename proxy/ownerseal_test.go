package proxy

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/credential"
)

// A seal is of one response id and one key, and a rotation of the tier's
// secret (a new primary installed beside the old) keeps what the old one
// sealed until the old is removed.
func TestASealIsOfOneResponseOneKeyAndSurvivesARotation(t *testing.T) {
	old, next := []byte("old-gossip-key-1"), []byte("new-gossip-key-2")
	ring := [][]byte{old}
	s := newOwnerSeal(func() [][]byte { return ring })
	k1, k2 := credential.IDOf([]byte("k1")), credential.IDOf([]byte("k2"))
	seal := []byte(s.seal("resp_a", k1))
	switch {
	case !s.holds(seal, "resp_a", k1):
		t.Fatal("a seal does not hold for what it sealed")
	case s.holds(seal, "resp_b", k1), s.holds(seal, "resp_a", k2), s.holds(seal, "resp_a", credential.ID{}):
		t.Fatal("a seal holds for another id or another key")
	case s.holds(seal[:len(seal)-2], "resp_a", k1), s.holds([]byte("zz"+string(seal[2:])), "resp_a", k1):
		t.Fatal("a cut or mangled seal holds")
	}
	ring = [][]byte{next, old}
	if !s.holds(seal, "resp_a", k1) || s.seal("resp_a", k1) == string(seal) {
		t.Fatal("after the new key became primary: the old seal must hold, new seals use the new key")
	}
	ring = [][]byte{next}
	if s.holds(seal, "resp_a", k1) {
		t.Fatal("a seal of a removed key still holds")
	}
	other := newOwnerSeal(nil)
	if other.holds([]byte(newOwnerSeal(nil).seal("resp_a", k1)), "resp_a", k1) {
		t.Fatal("replicas without a shared secret accept each other's seals")
	}
}
