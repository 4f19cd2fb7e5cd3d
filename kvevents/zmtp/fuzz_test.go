package zmtp

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// scriptedConn is a net.Conn whose peer has already sent everything it
// will: reads come from the script, writes go nowhere.
type scriptedConn struct{ r *bytes.Reader }

func (c scriptedConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c scriptedConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c scriptedConn) Close() error                     { return nil }
func (c scriptedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c scriptedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c scriptedConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzAPeer runs the handshake and reads messages from whatever a peer
// sends: it must end in an error or messages within the limits, never a
// panic, and never allocate beyond what the bytes sent and the limits allow.
func FuzzAPeer(f *testing.F) {
	hello := appendCommand(ourGreeting(), "READY", ready("PUB"))
	f.Add(appendMessage(hello, []byte("kv@h@m"), make([]byte, 8), []byte("payload")))
	f.Add(append(hello, binary.BigEndian.AppendUint64([]byte{flagLong}, 1<<40)...))
	f.Add(appendCommand(hello, "PING", []byte{0, 1, 'x'}))
	f.Add(appendFrame(hello, flagMore, nil))
	f.Add(ourGreeting())
	limits := Limits{MaxMessageBytes: 1 << 16, MaxFrames: 4}.withDefaults()
	f.Fuzz(func(t *testing.T, peer []byte) {
		c, err := Handshake(scriptedConn{bytes.NewReader(peer)}, "SUB", pubPeers, limits)
		if err != nil {
			return
		}
		for {
			frames, err := c.Recv()
			if err != nil {
				return
			}
			total := 0
			for _, fr := range frames {
				total += len(fr)
			}
			if len(frames) > limits.MaxFrames || total > limits.MaxMessageBytes || total > len(peer) {
				t.Fatalf("a message of %d frames, %d bytes, from %d sent", len(frames), total, len(peer))
			}
		}
	})
}
