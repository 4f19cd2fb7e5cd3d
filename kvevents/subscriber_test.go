package kvevents

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// loopbackOnly is a worker-host policy for the tests: 127.0.0.1 or nothing.
func loopbackOnly(hostport string) (string, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host != "127.0.0.1" {
		return "", errors.New("not loopback")
	}
	return hostport, nil
}

func startPublisher(t *testing.T, enc Encoding) *Publisher {
	t.Helper()
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Encoding: enc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// heard is a subscriber and the view it feeds.
type heard struct {
	*Subscriber
	view *View
}

func (h heard) Matched(tokens []uint32) int {
	return h.view.Matched(AppendKeys(nil, Seed(""), tokens, testBlock))
}

func (h heard) Stats() (Stats, int) {
	st := h.view.Status()
	return st.Stats, st.Blocks
}

func subscribe(t *testing.T, p *Publisher, replay bool) heard {
	t.Helper()
	cfg := SubscriberConfig{Endpoint: p.Endpoint(), Allow: loopbackOnly, Retry: 20 * time.Millisecond}
	if replay {
		cfg.ReplayEndpoint = p.ReplayEndpoint()
	}
	v := NewView(ViewConfig{BlockSize: testBlock, MaxBlocks: 1000})
	s, err := Subscribe(v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return heard{s, v}
}

// eventually waits for cond, publishing a batch of nudge each try (a PUB
// socket drops what it sends before the subscriber has connected), within
// a deadline generous for a loaded machine.
func eventually(t *testing.T, what string, nudge func(), cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 20*time.Second, func() bool {
		if cond() {
			return true
		}
		if nudge != nil {
			nudge()
		}
		return false
	}, "%s", what)
}

// withhold numbers a batch and keeps it for the replay without sending it:
// what no subscriber heard. (A batch published before any subscriber may
// still be on its way when one connects: the publisher's socket sends
// from a goroutine of its own.)
func withhold(t *testing.T, p *Publisher, events ...Event) {
	t.Helper()
	if err := p.Withhold(Batch{TS: 1, Events: events}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, p *Publisher, events ...Event) {
	t.Helper()
	if err := p.Publish(Batch{TS: 1, Events: events}); err != nil {
		t.Fatal(err)
	}
}

func TestASubscriberHearsWhatTheEngineStores(t *testing.T) {
	for _, enc := range []Encoding{Keyed, Positional} {
		p := startPublisher(t, enc)
		s := subscribe(t, p, true)
		held := prompt(1, 3)
		var n atomic.Int64
		eventually(t, "stored blocks heard", func() {
			publish(t, p, stored(names(EngineHash(100*n.Add(1))), nil, held))
		}, func() bool { st, _ := s.Stats(); return s.Matched(held) == 3 && st.Live > 0 }) // heard live: subscribed
		publish(t, p, Event{Kind: Cleared, Tier: true})
		eventually(t, "the clear heard", nil, func() bool { return s.Matched(held) == 0 })
	}
}

func TestASubscriberJoiningLateGetsTheEarlierBatchesFromTheReplay(t *testing.T) {
	p := startPublisher(t, Keyed)
	early := prompt(1, 2)
	withhold(t, p, stored(names(10), nil, early)) // before anyone listens
	s := subscribe(t, p, true)
	late := prompt(900, 1)
	// The live batch may be applied from the replay before the replay ends
	// and counts the gap repaired: wait for the end too.
	eventually(t, "a live batch", func() { publish(t, p, stored(names(500), nil, late)) },
		func() bool { st, _ := s.Stats(); return s.Matched(late) == 1 && st.Repaired+st.Lost > 0 })
	if got := s.Matched(early); got != 2 {
		t.Errorf("the batch published before the subscriber joined matched %d blocks, want 2 (from the replay)", got)
	}
	if st, _ := s.Stats(); st.Repaired == 0 || st.Lost != 0 {
		t.Errorf("stats %+v: the gap must be repaired, not lost", st)
	}
}

func TestWithoutAReplaySocketAGapEmptiesTheSet(t *testing.T) {
	p := startPublisher(t, Keyed)
	withhold(t, p, stored(names(10), nil, prompt(1, 2)))
	s := subscribe(t, p, false)
	late := prompt(900, 1)
	eventually(t, "a live batch", func() { publish(t, p, stored(names(500), nil, late)) },
		func() bool { return s.Matched(late) == 1 })
	if got := s.Matched(prompt(1, 2)); got != 0 {
		t.Errorf("matched %d blocks of a batch the subscriber never heard", got)
	}
}

func TestAnEngineRestartedAtTheSameAddressClearsTheSet(t *testing.T) {
	p := startPublisher(t, Keyed)
	s := subscribe(t, p, true)
	before := prompt(1, 2)
	eventually(t, "stored blocks, heard live", func() { publish(t, p, stored(names(10), nil, before)) },
		func() bool { st, _ := s.Stats(); return s.Matched(before) == 2 && st.Live > 0 })
	for range 3 {
		publish(t, p, Event{Kind: Stored, Tier: true, BlockSize: testBlock}) // empty stores: the sequence moves on
	}
	p.Restart()
	after := prompt(700, 1)
	eventually(t, "the restarted engine's blocks", func() { publish(t, p, stored(names(90), nil, after)) },
		func() bool { return s.Matched(after) == 1 })
	if s.Matched(before) != 0 {
		t.Error("blocks of the engine's previous life are still believed")
	}
	if st, _ := s.Stats(); st.Rewinds == 0 {
		t.Errorf("stats %+v: no rewind counted", st)
	}
}

func TestAnEndpointThePolicyRefusesIsNeverDialed(t *testing.T) {
	var asked []string
	policy := func(hostport string) (string, error) {
		asked = append(asked, hostport)
		return "", errors.New("refused by the worker-host policy")
	}
	v := NewView(ViewConfig{BlockSize: 16})
	_, err := Subscribe(v, SubscriberConfig{Endpoint: "tcp://metadata.internal:5557", Allow: policy})
	if err == nil || !strings.Contains(err.Error(), "refused by the worker-host policy") {
		t.Fatalf("err = %v, want the policy's refusal", err)
	}
	if len(asked) != 1 || asked[0] != "metadata.internal:5557" {
		t.Errorf("the policy was asked %v", asked)
	}
	for _, bad := range []string{"udp://127.0.0.1:1", "tcp://127.0.0.1", "127.0.0.1:5557", "tcp://127.0.0.1:5557/x"} {
		if _, err := Subscribe(v, SubscriberConfig{Endpoint: bad, Allow: loopbackOnly}); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}

// A subscriber catches up from the replay socket as soon as it connects: it
// holds what an idle engine stored before, with no live batch to reveal the
// gap.
func TestASubscriberCatchesUpAtConnectWithoutALiveBatch(t *testing.T) {
	p := startPublisher(t, Keyed)
	early := prompt(1, 2)
	withhold(t, p, stored(names(10), nil, early))
	withhold(t, p, Event{Kind: Stored, Tier: true, BlockSize: testBlock})
	s := subscribe(t, p, true)
	eventually(t, "the engine's earlier blocks, from the catch-up", nil, func() bool {
		st, _ := s.Stats()
		return s.Matched(early) == 2 && st.Repaired+st.Lost > 0 // and the catch-up over
	})
	if st, _ := s.Stats(); st.Repaired != 1 || st.Lost != 0 || st.Batches != 2 {
		t.Errorf("stats %+v: one late join, repaired by the catch-up", st)
	}
}
