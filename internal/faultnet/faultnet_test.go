package faultnet

import (
	"bufio"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is an upstream that sends every line back.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, within time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestABlackHoleHoldsTrafficAndDeliversItAfterTheHeal: in a black hole a
// connection stays open and hears nothing; what was sent arrives once
// healed, as TCP's retransmissions would deliver it.
func TestABlackHoleHoldsTrafficAndDeliversItAfterTheHeal(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("before the fault: %q, %v", got, err)
	}
	p.Cut(Drop)
	if _, err := roundTrip(c, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("in the black hole: %v, want a timeout", err)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a new connection into the black hole: %v (the kernel accepts it)", err)
	}
	defer fresh.Close()
	if _, err := roundTrip(fresh, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection in the black hole: %v, want a timeout", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	_ = fresh.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := bufio.NewReader(fresh).ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("after the heal, the line sent in the hole: %q, %v", got, err)
	}
}

// TestAResetAndARefusalAreWhatTheySay: Reset resets every connection,
// Refuse refuses new ones; both pass again once healed.
func TestAResetAndARefusalAreWhatTheySay(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Cut(Reset)
	if _, err := roundTrip(c, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("an established connection under Reset: %v, want a reset", err)
	}
	p.Cut(Refuse)
	if _, err := net.Dial("tcp", p.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial under Refuse: %v, want it refused", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	back, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if got, err := roundTrip(back, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}
