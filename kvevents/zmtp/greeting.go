package zmtp

import (
	"bytes"
	"io"
)

// A greeting is 64 bytes: the signature (0xFF, 8 bytes of padding, 0x7F),
// the version (major, minor), the mechanism's name padded with zeros to 20
// bytes, the as-server flag and 31 bytes of filler.
const greetingBytes = 64

var nullMechanism = [20]byte{'N', 'U', 'L', 'L'}

// ourGreeting is what this side sends: version 3.0, NULL, not a server.
func ourGreeting() []byte {
	g := make([]byte, greetingBytes)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], nullMechanism[:])
	return g
}

// readGreeting reads and checks the peer's greeting: a ZMTP signature, major
// version 3 or later (a later peer speaks 3.0 to us, as the version
// negotiation of RFC 23 has it), and the NULL mechanism.
func readGreeting(r io.Reader) error {
	var g [greetingBytes]byte
	if _, err := io.ReadFull(r, g[:]); err != nil {
		return err
	}
	switch {
	case g[0] != 0xff || g[9] != 0x7f:
		return protocolErr("not a ZMTP greeting")
	case g[10] < 3:
		return protocolErr("ZMTP %d.%d is older than 3.0", g[10], g[11])
	case !bytes.Equal(g[12:32], nullMechanism[:]):
		return protocolErr("security mechanism %q, not NULL", bytes.TrimRight(g[12:32], "\x00"))
	}
	return nil
}
