package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kvevents/zmtp"
)

// SubscriberConfig is how to hear one worker's engine by dialing its
// publisher (vLLM with a wildcard endpoint, tcp://*:5557, binds one).
type SubscriberConfig struct {
	// Endpoint is the engine's PUB socket, tcp://host:port.
	Endpoint string
	// ReplayEndpoint is the engine's replay socket; empty when it has none,
	// and then every gap empties the set.
	ReplayEndpoint string
	// Allow is the worker-host policy: it gets an endpoint's host:port before
	// any connection and returns the address to dial (resolved and checked),
	// or why not. Required.
	Allow func(hostport string) (string, error)
	// Limits bound what the engine's sockets may send (zmtp.Limits).
	Limits zmtp.Limits
	// ReplayTimeout bounds one replay (default 2 s).
	ReplayTimeout time.Duration
	// Retry is the pause between connection attempts (default 1 s); it
	// doubles, up to a minute, after each connection that ended in a
	// breach of the protocol or of Limits.
	Retry time.Duration
	// FromPeers, when set, fills the view from a peer's snapshot and says
	// whether it did: asked first when the stream starts with a gap (a
	// replica that starts while the engine runs), before the engine's own
	// replay socket, which may no longer keep the engine's first batches.
	FromPeers func(ctx context.Context) bool
}

// Subscriber dials one worker's engine and feeds what it hears into the
// worker's View, reconnecting when the engine goes away.
type Subscriber struct {
	cfg            SubscriberConfig
	view           *View
	live, replayTo string // the dial addresses, past the policy
	cancel         context.CancelFunc
	done           chan struct{}
	// violations counts connections ended by a breach of the protocol or
	// of the limits.
	violations atomic.Uint64
}

// Subscribe checks cfg against the policy and starts hearing the engine
// into view.
func Subscribe(view *View, cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Allow == nil {
		return nil, errors.New("kvevents: no worker-host policy")
	}
	s := &Subscriber{cfg: cfg, view: view, done: make(chan struct{})}
	var err error
	if s.live, err = allowed(cfg.Endpoint, cfg.Allow); err != nil {
		return nil, err
	}
	if cfg.ReplayEndpoint != "" {
		if s.replayTo, err = allowed(cfg.ReplayEndpoint, cfg.Allow); err != nil {
			return nil, err
		}
	}
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	go s.run(ctx)
	return s, nil
}

// allowed is the host:port to dial for a tcp://host:port endpoint, past the
// policy.
func allowed(endpoint string, allow func(string) (string, error)) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Port() == "" || u.Path != "" {
		return "", fmt.Errorf("kvevents: endpoint %q is not tcp://host:port", endpoint)
	}
	addr, err := allow(u.Host)
	if err != nil {
		return "", fmt.Errorf("kvevents: endpoint %s: %w", endpoint, err)
	}
	return addr, nil
}

// Violations is how many connections to the engine ended in a breach of
// the protocol or of the limits.
func (s *Subscriber) Violations() uint64 { return s.violations.Load() }

// Close stops hearing the engine and waits for the subscriber's goroutine.
func (s *Subscriber) Close() {
	s.cancel()
	<-s.done
}

func (s *Subscriber) run(ctx context.Context) {
	defer close(s.done)
	pause := s.retry()
	for ctx.Err() == nil {
		if errors.Is(s.hear(ctx), zmtp.ErrProtocol) {
			s.violations.Add(1)
			pause = min(2*pause, time.Minute)
		} else {
			pause = s.retry()
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (s *Subscriber) retry() time.Duration {
	if s.cfg.Retry > 0 {
		return s.cfg.Retry
	}
	return time.Second
}

// hear reads live batches until the connection or ctx ends, and says why
// it ended.
func (s *Subscriber) hear(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := zmtp.DialSub(ctx, s.live, s.cfg.Limits)
	if err != nil {
		return err
	}
	defer c.Close()
	s.view.Connected()
	defer s.view.Disconnected()
	s.catchUp(ctx)
	for {
		frames, err := c.Recv()
		if err != nil {
			return err
		}
		topic, seq, payload, ok := eventMessage(frames)
		if !ok {
			s.view.Unparsable()
			continue
		}
		if from, gap := s.view.Offer(topic, seq, payload); gap {
			s.fill(ctx, from)
		}
	}
}

// eventMessage splits [topic, sequence (8 bytes, big-endian), payload].
func eventMessage(frames [][]byte) (topic string, seq uint64, payload []byte, ok bool) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		return "", 0, nil, false
	}
	return string(frames[0]), binary.BigEndian.Uint64(frames[1]), frames[2], true
}

// fill fills a gap: a stream that starts with one asks a peer first; then
// the engine's replay socket, if it has one, gives what is still missing.
func (s *Subscriber) fill(ctx context.Context, from uint64) {
	if from == 0 && s.cfg.FromPeers != nil && s.cfg.FromPeers(ctx) {
		_, from, _ = s.view.position()
	}
	if s.replayTo != "" {
		replay(ctx, s.replayTo, from, s.cfg, s.view.Replayed)
	}
	s.view.EndReplay()
}

// catchUp replays the engine's kept batches as soon as the connection is
// made, so the set holds what the engine does before its next live batch
// (an idle engine may publish none for long); the live batches that arrive
// meanwhile wait on the socket.
func (s *Subscriber) catchUp(ctx context.Context) {
	if s.replayTo == "" {
		return
	}
	from, ok := s.view.CatchUp()
	if !ok {
		return
	}
	replay(ctx, s.replayTo, from, s.cfg, s.view.Replayed)
	s.view.EndCatchUp()
}

// endOfReplay is the sequence number that ends a replay answer.
var endOfReplay = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// replay asks the ROUTER at addr for every batch from from and hands each
// to take, until the end marker, an error or the timeout. vLLM's replay
// socket takes ["", start sequence] and answers ["", sequence, payload]
// for each batch it kept, then ["", -1, ""].
func replay(ctx context.Context, addr string, from uint64, cfg SubscriberConfig, take func(uint64, []byte)) {
	timeout := cfg.ReplayTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := zmtp.DialDealer(ctx, addr, cfg.Limits)
	if err != nil {
		return
	}
	defer d.Close()
	if d.Send(nil, binary.BigEndian.AppendUint64(nil, from)) != nil {
		return
	}
	for {
		frames, err := d.Recv()
		if err != nil || len(frames) != 3 || len(frames[1]) != 8 || [8]byte(frames[1]) == endOfReplay {
			return
		}
		take(binary.BigEndian.Uint64(frames[1]), frames[2])
	}
}
