package loadsync

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func loopbackTransport(t *testing.T) *transport {
	t.Helper()
	tr, err := listen(net.IPv4(127, 0, 0, 1), 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func receive(t *testing.T, tr *transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet within 10 s")
		return nil
	}
}

// TestTheTransportHandsEachPacketItsOwnBytes: two packets read one after
// the other keep their own bytes (the read buffer is reused, the packet's
// bytes are not), each in a slice of its own size, not a 64 KiB buffer
// per packet; the sender is named.
func TestTheTransportHandsEachPacketItsOwnBytes(t *testing.T) {
	from, to := loopbackTransport(t), loopbackTransport(t)
	addr, port, err := to.FinalAdvertiseAddr("", 0)
	if err != nil {
		t.Fatal(err)
	}
	dest := net.JoinHostPort(addr.String(), strconv.Itoa(port))
	sent := [][]byte{bytes.Repeat([]byte("a"), 300), []byte("the second, shorter")}
	for _, b := range sent {
		if _, err := from.WriteTo(b, dest); err != nil {
			t.Fatal(err)
		}
	}
	var got []*memberlist.Packet
	for range sent {
		got = append(got, receive(t, to))
	}
	for i, p := range got {
		if !bytes.Equal(p.Buf, sent[i]) || cap(p.Buf) != len(p.Buf) {
			t.Errorf("packet %d: %q (cap %d), want %q in a slice of its size", i, p.Buf, cap(p.Buf), sent[i])
		}
		if p.From.String() != from.udp.LocalAddr().String() {
			t.Errorf("packet %d from %v, want %v", i, p.From, from.udp.LocalAddr())
		}
	}
}

// TestTheTransportAdvertisesTheAddressItBound: bound to a port the system
// picks, it advertises the bound address and that port, TCP and UDP alike.
func TestTheTransportAdvertisesTheAddressItBound(t *testing.T) {
	tr := loopbackTransport(t)
	addr, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil || !addr.Equal(net.IPv4(127, 0, 0, 1)) || port == 0 ||
		port != tr.udp.LocalAddr().(*net.UDPAddr).Port {
		t.Fatalf("advertises %v:%d (%v), want 127.0.0.1 and the port both sockets bound", addr, port, err)
	}
	if addr, port, err := tr.FinalAdvertiseAddr("10.1.2.3", 7946); err != nil || addr.String() != "10.1.2.3" || port != 7946 {
		t.Errorf("an advertise address given: %v:%d (%v), want it as given", addr, port, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("not-an-ip", 7946); err == nil {
		t.Error("an advertise address that is not an IP was taken")
	}
}

// TestTheTransportShutsDownWithAPacketNobodyRead: a reader blocked handing
// over a packet that memberlist never takes does not hold Shutdown.
func TestTheTransportShutsDownWithAPacketNobodyRead(t *testing.T) {
	from := loopbackTransport(t)
	to, err := listen(net.IPv4(127, 0, 0, 1), 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.WriteTo([]byte("never read"), to.udp.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- to.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown still waiting after 10 s")
	}
}

// TestTheTransportNamesIPv4PeersInIPv4WhenBoundToEveryAddress: a socket
// bound to every address hears an IPv4 peer as an IPv4-mapped IPv6 one;
// the packet still names the peer as memberlist knows it, in IPv4 (a
// net.UDPAddr prints a mapped address so; a netip.AddrPort would not).
// Only loopback is sent to.
func TestTheTransportNamesIPv4PeersInIPv4WhenBoundToEveryAddress(t *testing.T) {
	from := loopbackTransport(t)
	all, err := listen(nil, 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = all.Shutdown() })
	to := net.JoinHostPort("127.0.0.1", strconv.Itoa(all.udp.LocalAddr().(*net.UDPAddr).Port))
	if _, err := from.WriteTo([]byte("hello"), to); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, all); p.From.String() != from.udp.LocalAddr().String() {
		t.Errorf("the packet names its sender %v, want %v", p.From, from.udp.LocalAddr())
	}
}
