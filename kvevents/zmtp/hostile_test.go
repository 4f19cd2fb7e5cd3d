package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fakePeer listens on loopback and, to each connection, writes what script
// says after reading the greeting it is sent (a hostile "engine").
func fakePeer(t *testing.T, script func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			script(nc)
			nc.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// handshakeAs writes a valid greeting and READY of socketType.
func handshakeAs(nc net.Conn, socketType string) {
	_, _ = nc.Write(appendCommand(ourGreeting(), "READY", ready(socketType)))
}

// drainGreeting reads what our side sends first (greeting, READY).
func drainGreeting(nc net.Conn) {
	buf := make([]byte, 512)
	_ = nc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = nc.Read(buf)
}

// TestAFrameAnnouncing2To40BytesIsRefusedUnallocated is the 73 bytes that
// killed every replica: a valid greeting, READY, and a frame header
// announcing 2^40 bytes. The connection ends with ErrTooLarge and nothing
// near that size is allocated.
func TestAFrameAnnouncing2To40BytesIsRefusedUnallocated(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAs(nc, "PUB")
		drainGreeting(nc)
		hdr := []byte{flagLong}
		_, _ = nc.Write(binary.BigEndian.AppendUint64(hdr, 1<<40))
		drainGreeting(nc)
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := DialSub(context.Background(), addr, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Recv()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrProtocol) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("allocated %d bytes for a refused frame", grew)
	}
}

// TestABodyGrowsWithTheBytesThatArrive: a frame within the bound that
// announces 8 MiB and brings 10 bytes costs its reader about one read
// chunk, not 8 MiB.
func TestABodyGrowsWithTheBytesThatArrive(t *testing.T) {
	stream := append(binary.BigEndian.AppendUint64([]byte{flagLong}, 8<<20), "0123456789"...)
	f := frameReader{r: bufio.NewReader(bytes.NewReader(stream)), limits: Limits{}.withDefaults()}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := f.next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v, want the stream cut short", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for 10 that arrived", grew)
	}
}

func TestAMessageOfTooManyFramesIsRefused(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAs(nc, "PUB")
		drainGreeting(nc)
		var b []byte
		for range 10_000 {
			b = appendFrame(b, flagMore, nil)
		}
		_, _ = nc.Write(b)
		drainGreeting(nc)
	})
	c, err := DialSub(context.Background(), addr, Limits{MaxFrames: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Recv(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
}

func TestAMessageOverItsBoundIsRefused(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAs(nc, "PUB")
		drainGreeting(nc)
		_, _ = nc.Write(appendMessage(nil, make([]byte, 600), make([]byte, 600)))
		drainGreeting(nc)
	})
	c, err := DialSub(context.Background(), addr, Limits{MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Recv(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
}

func TestAHugeCommandIsRefused(t *testing.T) {
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAs(nc, "PUB")
		drainGreeting(nc)
		_, _ = nc.Write(appendCommand(nil, "X", make([]byte, maxCommandBytes)))
		drainGreeting(nc)
	})
	c, err := DialSub(context.Background(), addr, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Recv(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
}

func TestAPingIsAnsweredWithAPong(t *testing.T) {
	pong := make(chan []byte, 1)
	addr := fakePeer(t, func(nc net.Conn) {
		handshakeAs(nc, "PUB")
		// Our greeting, READY and subscription, read exactly.
		hello := appendMessage(appendCommand(ourGreeting(), "READY", ready("SUB")), subscribeAll)
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(nc, make([]byte, len(hello))); err != nil {
			return
		}
		_, _ = nc.Write(appendCommand(nil, "PING", []byte{0, 10, 'c', 't', 'x'}))
		buf := make([]byte, 64)
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := nc.Read(buf)
		pong <- buf[:n]
		_, _ = nc.Write(appendMessage(nil, []byte("t"), []byte("after")))
	})
	c, err := DialSub(context.Background(), addr, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frames, err := c.Recv()
	if err != nil || string(frames[1]) != "after" {
		t.Fatalf("frames %q, err %v", frames, err)
	}
	if got, want := <-pong, appendCommand(nil, "PONG", []byte("ctx")); string(got) != string(want) {
		t.Fatalf("answer %q, want the PONG %q", got, want)
	}
}

func TestAGreetingOfAnotherProtocolIsRefused(t *testing.T) {
	for name, greeting := range map[string][]byte{
		"http":     []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" + string(make([]byte, 64))),
		"zmtp 2":   append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 1, 0}, make([]byte, 52)...),
		"curve":    append(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1}, "CURVE"...), make([]byte, 47)...),
		"no ready": appendMessage(ourGreeting(), []byte("x")),
	} {
		t.Run(name, func(t *testing.T) {
			addr := fakePeer(t, func(nc net.Conn) {
				_, _ = nc.Write(greeting)
				drainGreeting(nc)
			})
			if _, err := DialSub(context.Background(), addr, Limits{}); !errors.Is(err, ErrProtocol) {
				t.Fatalf("err %v, want ErrProtocol", err)
			}
		})
	}
}

// TestASilentPeerHoldsUpNoOtherPublisher: a connection that never greets
// is closed at the handshake timeout, and a publisher that arrives after it
// is heard meanwhile.
func TestASilentPeerHoldsUpNoOtherPublisher(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 4)
	heard := make(chan struct{}, 1)
	l := ListenSub(ln, ListenConfig{Limits: Limits{HandshakeTimeout: 300 * time.Millisecond},
		Admit:   func(netip.AddrPort) error { return nil },
		Refused: func(_ net.Addr, err error) { refused <- err },
		Serve: func(c *Conn) {
			if _, err := c.Recv(); err == nil {
				heard <- struct{}{}
			}
		}})
	defer l.Close()
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	talker, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	handshakeAs(talker, "PUB")
	_, _ = talker.Write(appendMessage(nil, []byte("t"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte("p")))
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("the publisher behind a silent peer was not heard")
	}
	select {
	case err := <-refused:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("silent peer refused with %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the silent peer was never cut")
	}
}

func TestAnAddressRefusedByAdmitIsClosedUnread(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	refused := make(chan error, 1)
	errNotAWorker := errors.New("not a worker's host")
	l := ListenSub(ln, ListenConfig{Admit: func(netip.AddrPort) error { return errNotAWorker },
		Refused: func(_ net.Addr, err error) { refused <- err },
		Serve:   func(*Conn) { served.Add(1) }})
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := <-refused; !errors.Is(err, errNotAWorker) {
		t.Fatalf("refused with %v", err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, err %v: a refused peer got a greeting", n, err)
	}
	if served.Load() != 0 {
		t.Fatal("a refused connection was served")
	}
}

func TestConnectionsAreBoundedInAllAndPerHost(t *testing.T) {
	for name, cfg := range map[string]ListenConfig{
		"in all":   {MaxConns: 2, MaxPerHost: 16},
		"per host": {MaxConns: 16, MaxPerHost: 2},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			refused := make(chan error, 1)
			cfg.Admit = func(netip.AddrPort) error { return nil }
			cfg.Refused = func(_ net.Addr, err error) {
				select { // the first refusal is the one judged; a later one must not block Close
				case refused <- err:
				default:
				}
			}
			cfg.Serve = func(c *Conn) { _, _ = c.Recv() }
			l := ListenSub(ln, cfg)
			defer l.Close()
			for range 3 {
				nc, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				handshakeAs(nc, "PUB")
			}
			if err := <-refused; !errors.Is(err, ErrTooManyConns) && !errors.Is(err, ErrTooManyHost) {
				t.Fatalf("the third connection refused with %v", err)
			}
		})
	}
}
