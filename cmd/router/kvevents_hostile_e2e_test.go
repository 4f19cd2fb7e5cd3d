package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/kvevents"
)

// What an engine's event port can do to a replica, tried on real
// processes: anything that listens there (a hostile engine, or whoever took
// its port) gets at most a worker routed on the text index, never a
// replica's memory or its life.

// zmtpHello is a valid ZMTP 3.0 greeting and a READY of socket type
// PUB: what a publisher sends first.
func zmtpHello() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	body := append([]byte{5}, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, 3)
	body = append(body, "PUB"...)
	return append(append(g, 0x04, byte(len(body))), body...)
}

// hostilePort listens on loopback and answers every connection with a
// greeting and then a frame header announcing 2^40 bytes: the 73 bytes that
// killed every replica of a tier.
func hostilePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			msg := append(zmtpHello(), binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40)...)
			go func() {
				defer c.Close()
				_, _ = c.Write(msg)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = c.Read(make([]byte, 4096))
			}()
		}
	}()
	return ln.Addr().String()
}

func TestEndToEndA2To40ByteFrameOnAnEnginesSocketsKillsNoReplica(t *testing.T) {
	routerBin, workersim := binaries(t)
	_, worker := startWorkersim(t, workersim, "w0")
	live, replay := hostilePort(t), hostilePort(t)
	_, livePort, _ := net.SplitHostPort(live)
	_, replayPort, _ := net.SplitHostPort(replay)
	offset := mustAtoi(t, replayPort) - mustAtoi(t, livePort)
	p := startRouterProcessKeep(t, routerBin, "--worker-urls", worker, "--kv-events", "--kv-events-endpoints", "tcp://"+live,
		"--kv-events-replay-offset", strconv.Itoa(offset))
	router := "http://" + p.await(t, `router ready" addr=(\S+)`)
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		if v := metric(t, router, fmt.Sprintf(`vllm_router_kv_events_violations{worker=%q}`, worker)); v < 3 {
			return fmt.Errorf("%v connections cut", v)
		}
		return nil
	}, "the hostile engine's connections cut, again and again")
	if c := complete(t, router, "still serving", false); c.status != http.StatusOK {
		t.Fatalf("the replica answers %d", c.status)
	}
	if s := kvStates(t, router)[worker]; s == "trusted" {
		t.Errorf("the hostile engine's worker is %s", s)
	}
	if rss := peakRSS(t, p.cmd.Process.Pid); rss > 200<<20 {
		t.Errorf("the replica's peak RSS is %d MiB", rss>>20)
	}
}

// TestEndToEndAFloodOfEventsStaysWithinItsBound: batches of 50,000 stored
// events, each a new engine name over the same 16 tokens (the review's
// flood, KVROUTER_FLOOD_BATCHES of them, 20 here; the review sent 200).
func TestEndToEndAFloodOfEventsStaysWithinItsBound(t *testing.T) {
	routerBin, workersim := binaries(t)
	_, worker := startWorkersim(t, workersim, "w0")
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Encoding: kvevents.Positional})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p := startRouterProcessKeep(t, routerBin, "--worker-urls", worker, "--kv-events", "--kv-events-endpoints", pub.Endpoint(),
		"--kv-events-replay-offset", "-1")
	router := "http://" + p.await(t, `router ready" addr=(\S+)`)
	batches := 20
	if n, err := strconv.Atoi(os.Getenv("KVROUTER_FLOOD_BATCHES")); err == nil {
		batches = n
	}
	tokens := make([]uint32, 16)
	name := kvevents.EngineHash(1)
	batch := func() kvevents.Batch {
		b := kvevents.Batch{TS: 1}
		for range 50_000 {
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.Stored, Tier: true, BlockSize: 16, Tokens: tokens,
				Hashes: []kvevents.EngineHash{name}})
			name++
		}
		return b
	}
	testwait.EventuallyNil(t, 30*time.Second, func() error { // the first batches go before the subscription: again until heard
		if err := pub.Publish(batch()); err != nil {
			return err
		}
		if b := metric(t, router, fmt.Sprintf(`vllm_router_kv_events_batches{worker=%q}`, worker)); b == 0 {
			return fmt.Errorf("nothing heard")
		}
		return nil
	}, "the flood heard")
	for range batches {
		if err := pub.Publish(batch()); err != nil {
			t.Fatal(err)
		}
	}
	testwait.EventuallyNil(t, 5*time.Minute, func() error {
		if b := metric(t, router, fmt.Sprintf(`vllm_router_kv_events_batches{worker=%q}`, worker)); b < float64(batches) {
			return fmt.Errorf("%v of %d batches applied", b, batches)
		}
		return nil
	}, "the flood applied")
	rows := kvRows(t, router)
	rss := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("%d batches of 50,000 names for one block: %d blocks held, peak RSS %d MiB", batches, rows[worker].Blocks, rss>>20)
	if rows[worker].Blocks != 1 {
		t.Errorf("%d blocks held", rows[worker].Blocks)
	}
	if rss > 200<<20 {
		t.Errorf("the replica's peak RSS is %d MiB, over 200", rss>>20)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
