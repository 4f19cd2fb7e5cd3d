package zmtp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// These tests talk to go-zeromq, an independent ZMTP implementation (the one
// llm-d-inference-sim publishes with), in both directions.

func publisher(t *testing.T) zmq4.Socket {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx)
	t.Cleanup(func() { pub.Close(); cancel() })
	return pub
}

func eventMsg(seq byte) zmq4.Msg {
	return zmq4.NewMsgFrom([]byte("kv@127.0.0.1:8000@m"), []byte{0, 0, 0, 0, 0, 0, 0, seq}, bytes.Repeat([]byte{seq}, 300))
}

// recvEvent waits for the next message, publishing again meanwhile: a PUB
// sends only to subscribers it has heard, so the first messages may be sent
// before the subscription arrives.
func recvEvent(t *testing.T, c *Conn, publish func()) [][]byte {
	t.Helper()
	got := make(chan [][]byte, 1)
	go func() {
		frames, err := c.Recv()
		if err != nil {
			t.Errorf("recv: %v", err)
		}
		got <- frames
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case f := <-got:
			return f
		case <-tick.C:
			publish()
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
		}
	}
}

func TestASubscriberDialsABoundPublisher(t *testing.T) {
	pub := publisher(t)
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := DialSub(ctx, pub.Addr().String(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Peer != "PUB" {
		t.Fatalf("peer %q", c.Peer)
	}
	frames := recvEvent(t, c, func() { _ = pub.Send(eventMsg(7)) })
	if len(frames) != 3 || string(frames[0]) != "kv@127.0.0.1:8000@m" || frames[1][7] != 7 || len(frames[2]) != 300 {
		t.Fatalf("frames %q", frames)
	}
}

func TestAPublisherDialsABoundSubscriber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan [][]byte, 16)
	l := ListenSub(ln, ListenConfig{Admit: func(netip.AddrPort) error { return nil }, Serve: func(c *Conn) {
		for {
			frames, err := c.Recv()
			if err != nil {
				return
			}
			heard <- frames
		}
	}})
	defer l.Close()
	pub := publisher(t)
	if err := pub.Dial("tcp://" + l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		_ = pub.Send(eventMsg(3))
		select {
		case f := <-heard:
			if len(f) != 3 || f[1][7] != 3 {
				t.Fatalf("frames %q", f)
			}
			return
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatal("nothing heard")
		}
	}
}

func TestADealerAsksARouter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	router := zmq4.NewRouter(ctx)
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		msg, err := router.Recv()
		if err != nil {
			return
		}
		// [identity, "", question] -> [identity, "", answer]
		_ = router.Send(zmq4.NewMsgFrom(msg.Frames[0], nil, append([]byte("re:"), msg.Frames[2]...)))
	}()
	c, err := DialDealer(ctx, router.Addr().String(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(nil, []byte("seq")); err != nil {
		t.Fatal(err)
	}
	frames, err := c.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || len(frames[0]) != 0 || string(frames[1]) != "re:seq" {
		t.Fatalf("frames %q", frames)
	}
}

func TestASubscriberRefusesAPeerOfAnotherKind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	_, err := DialSub(ctx, push.Addr().String(), Limits{})
	if err == nil || !strings.Contains(err.Error(), "PUSH peer") {
		t.Fatalf("err %v, want a refusal of the PUSH peer", err)
	}
}

func TestCloseEndsEveryConnectionAndItsGoroutine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{}, 1)
	l := ListenSub(ln, ListenConfig{Admit: func(netip.AddrPort) error { return nil }, Serve: func(c *Conn) {
		serving <- struct{}{}
		for {
			if _, err := c.Recv(); err != nil {
				return
			}
		}
	}})
	pub := publisher(t)
	if err := pub.Dial("tcp://" + l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	<-serving
	l.Close() // returns only once Serve returned: goleak checks the rest
	testwait.Eventually(t, 5*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.conns) == 0
	}, "the listener to drop its connections")
}
