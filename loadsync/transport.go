package loadsync

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// transport is memberlist's network (a UDP socket for packets, TCP for its
// state exchanges) with every packet read into a buffer of its own size.
// memberlist's NetTransport reads each packet into a fresh 64 KiB buffer:
// with a load report from every peer every flush interval, that was 92% of
// a replica's allocated bytes (17 MB/s at 8 replicas under load) and a
// garbage collector taking 15-21% of the replica's CPU. Here one buffer is
// read into and the packet's bytes copied out.
type transport struct {
	tcp     *net.TCPListener
	udp     *net.UDPConn
	packets chan *memberlist.Packet
	streams chan net.Conn
	logger  *log.Logger
	done    chan struct{} // closed by Shutdown
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

const (
	// maxPacket is the largest UDP payload: a packet never needs more.
	maxPacket = 65536
	// udpReadBuffer is the kernel's receive buffer asked for, so that a
	// burst of reports waits there rather than being dropped while the
	// reader is descheduled; smaller sizes are tried when refused.
	udpReadBuffer = 2 << 20
)

// listen binds TCP and UDP on ip:port (port 0: one the system picks, the
// same for both) and starts reading.
func listen(ip net.IP, port int, logger *log.Logger) (*transport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("gossip TCP listener on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("gossip UDP listener on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	for size := udpReadBuffer; size >= 64<<10; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{tcp: tcp, udp: udp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), logger: logger, done: make(chan struct{})}
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

// readPackets hands memberlist each packet in a slice of its own length.
func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		at := time.Now()
		if err != nil {
			if t.closed() {
				return
			}
			t.logger.Printf("[ERR] loadsync: reading a gossip packet: %v", err)
			continue
		}
		if n == 0 {
			continue // memberlist needs at least a message type
		}
		own := make([]byte, n)
		copy(own, buf)
		t.packets <- &memberlist.Packet{Buf: own, From: net.UDPAddrFromAddrPort(from), Timestamp: at}
	}
}

// acceptStreams hands memberlist the TCP connections of its state
// exchanges, backing off while accepting fails (out of descriptors).
func (t *transport) acceptStreams() {
	defer t.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed() {
				return
			}
			t.logger.Printf("[ERR] loadsync: accepting a gossip connection: %v; retrying in %v", err, backoff)
			select {
			case <-t.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		t.streams <- conn
	}
}

func (t *transport) closed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// FinalAdvertiseAddr is the address peers reach this node at: ip when set,
// else the bound one, or a private address of the host when bound to all.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		return addr, port, nil
	}
	bound := t.tcp.Addr().(*net.TCPAddr)
	if !bound.IP.IsUnspecified() {
		return bound.IP, bound.Port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("finding a private address to advertise: %w", err)
	}
	addr := net.ParseIP(private)
	if addr == nil {
		return nil, 0, errors.New("bound to every address, no private one found and none given to advertise")
	}
	return addr, bound.Port, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet; peers' addresses are ip:port, so they are
// parsed, not looked up.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		udp, rerr := net.ResolveUDPAddr("udp", a.Addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		to = udp.AddrPort()
	}
	_, err = t.udp.WriteToUDPAddrPort(b, to)
	return time.Now(), err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes both sockets and waits for the readers; one blocked
// handing memberlist a packet or a connection is released by taking it
// here.
func (t *transport) Shutdown() error {
	close(t.done)
	errs := errors.Join(t.tcp.Close(), t.udp.Close())
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return errs
		case <-t.packets:
		case c := <-t.streams:
			_ = c.Close()
		}
	}
}
