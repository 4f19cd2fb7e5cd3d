package zmtp

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Conn is one ZMTP connection after its handshake. Recv is for one
// goroutine; Send may be called from any (a PONG goes out from Recv's).
type Conn struct {
	nc     net.Conn
	frames frameReader
	// Peer is the socket type the peer announced.
	Peer string

	wmu sync.Mutex
}

// Handshake greets the peer over nc and exchanges READY, within
// limits.HandshakeTimeout: this side is a socketType socket, and the peer's
// type must be one of accept. On failure nc is closed.
func Handshake(nc net.Conn, socketType string, accept []string, limits Limits) (*Conn, error) {
	limits = limits.withDefaults()
	c := &Conn{nc: nc, frames: frameReader{r: bufio.NewReaderSize(nc, readChunk), limits: limits}}
	if err := c.handshake(socketType, accept, time.Now().Add(limits.HandshakeTimeout)); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) handshake(ours string, accept []string, deadline time.Time) error {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return err
	}
	out := appendCommand(ourGreeting(), "READY", ready(ours))
	// The greeting and READY go out at once: a ZMTP 3 peer reads our
	// signature, answers with the rest of its greeting and then READY.
	if _, err := c.nc.Write(out); err != nil {
		return fmt.Errorf("zmtp: handshake: %w", err)
	}
	if err := readGreeting(c.frames.r); err != nil {
		return fmt.Errorf("zmtp: handshake: %w", err)
	}
	frames, isCommand, err := c.frames.next()
	if err != nil {
		return fmt.Errorf("zmtp: handshake: %w", err)
	}
	if !isCommand {
		return protocolErr("a message before READY")
	}
	name, data, err := parseCommand(frames[0])
	if err != nil {
		return err
	}
	if name != "READY" {
		return protocolErr("%q before READY", name)
	}
	if c.Peer, err = socketType(data); err != nil {
		return err
	}
	if !slices.Contains(accept, c.Peer) {
		return protocolErr("a %s peer, not one of %v", c.Peer, accept)
	}
	return c.nc.SetDeadline(time.Time{})
}

// Recv returns the next message's frames. Commands are handled on the way
// (a PING is answered, an ERROR ends the connection, others are skipped).
// An error ends the connection: the caller closes it.
func (c *Conn) Recv() ([][]byte, error) {
	for {
		frames, isCommand, err := c.frames.next()
		if err != nil {
			return nil, err
		}
		if !isCommand {
			return frames, nil
		}
		if err := c.command(frames[0]); err != nil {
			return nil, err
		}
	}
}

func (c *Conn) command(frame []byte) error {
	name, data, err := parseCommand(frame)
	if err != nil {
		return err
	}
	switch name {
	case "PING":
		// PING is a TTL (2 bytes) and a context the PONG echoes.
		if len(data) < 2 {
			return protocolErr("PING of %d bytes", len(data))
		}
		return c.write(appendCommand(nil, "PONG", data[2:]))
	case "ERROR":
		return protocolErr("the peer said ERROR")
	}
	return nil
}

// Send writes one message of frames.
func (c *Conn) Send(frames ...[]byte) error {
	return c.write(appendMessage(nil, frames...))
}

// write writes b within the handshake's timeout: a peer that sends PINGs
// and never reads cannot hold Recv's goroutine in a write.
func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.frames.limits.HandshakeTimeout)); err != nil {
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

// SetReadDeadline bounds the next Recv.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection; a Recv under way returns an error.
func (c *Conn) Close() error { return c.nc.Close() }
