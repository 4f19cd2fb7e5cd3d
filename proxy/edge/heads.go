package edge

import (
	"crypto/tls"
	"errors"
	"net"
)

// A request head whose lines end with a bare LF, not CRLF (a hand-written
// client, netcat), never ends for fasthttp, which waits for CRLF CRLF until
// --header-read-timeout-secs. headEnds watches the first request head of
// each connection and, once it ended with bare LFs, fails the next read,
// so that the client gets a 400 at once. Later requests on a kept-alive
// connection come from a client whose first head was right.
type headEnds struct {
	started, done bool // a byte of the request line came; the head ended
	lastCR        bool // the last byte was CR
	lineLen       int  // bytes of the current line, a closing CR not counted
	prevCRLF      bool // the line before ended with CRLF
	bad           bool // the head ended without CRLF CRLF
}

// ErrBareLF fails the read after a head that ended with bare LFs.
var ErrBareLF = errors.New("the request head ends its lines with a bare LF: HTTP/1.1 needs CRLF (RFC 9112, 2.2)")

// scan follows b, the next bytes the connection read.
func (h *headEnds) scan(b []byte) {
	for _, c := range b {
		if h.done {
			return
		}
		switch c {
		case '\n':
			if h.started && h.lineLen == 0 {
				h.done, h.bad = true, !(h.lastCR && h.prevCRLF)
			}
			h.prevCRLF, h.lineLen, h.lastCR = h.lastCR, 0, false
		case '\r':
			if h.lastCR {
				h.lineLen++
			}
			h.lastCR = true
		default:
			if h.lastCR {
				h.lineLen++
			}
			h.lineLen++
			h.lastCR, h.started = false, true
		}
	}
}

// read is a connection's Read through the watch.
func (h *headEnds) read(read func([]byte) (int, error), b []byte) (int, error) {
	if h.bad {
		return 0, ErrBareLF
	}
	n, err := read(b)
	if !h.done {
		h.scan(b[:n])
	}
	return n, err
}

// tlsHeadConn watches the plaintext of a TLS client connection; fasthttp
// still sees a TLS connection (Handshake, ConnectionState).
type tlsHeadConn struct {
	*tls.Conn
	head headEnds
}

func (c *tlsHeadConn) Read(b []byte) (int, error) { return c.head.read(c.Conn.Read, b) }

// NetConn returns the connection underneath, for edgeOf and the peeks.
func (c *tlsHeadConn) NetConn() net.Conn { return c.Conn.NetConn() }

// TLSListener hands out watched TLS connections.
type TLSListener struct{ net.Listener }

func (l TLSListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*tls.Conn); ok && err == nil {
		return &tlsHeadConn{Conn: tc}, nil
	}
	return c, err
}
