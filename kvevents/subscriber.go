package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// SubscriberConfig is how to hear one worker's engine.
type SubscriberConfig struct {
	// Endpoint is the engine's PUB socket, tcp://host:port (vLLM's default
	// port is 5557).
	Endpoint string
	// ReplayEndpoint is the engine's replay socket; empty when it has none,
	// and then every gap empties the set.
	ReplayEndpoint string
	// Model seeds the keys: the model the worker serves.
	Model string
	// BlockSize is the engine's block size in tokens; events of another size
	// are refused.
	BlockSize int
	// MaxBlocks bounds the set (the engine's num_gpu_blocks is enough).
	MaxBlocks int
	// Allow is the worker-host policy: it gets an endpoint's host:port before
	// any connection and returns the address to dial (resolved and checked),
	// or why not. Required.
	Allow func(hostport string) (string, error)
	// ReplayTimeout bounds one replay (default 2 s).
	ReplayTimeout time.Duration
	// Retry is the pause between connection attempts (default 1 s).
	Retry time.Duration
	// StaleAfter is how long the engine may have work and publish nothing,
	// and how long a set emptied by a reset is not trusted (default
	// DefaultStaleAfter).
	StaleAfter time.Duration
	// Now is the clock of Trust and Expect (default time.Now).
	Now func() time.Time
}

// Subscriber hears one worker's events into its Set, reconnecting when the
// engine goes away. Matched and Stats may be called from any goroutine.
type Subscriber struct {
	cfg            SubscriberConfig
	live, replayTo string // the dial addresses, past the policy
	cancel         context.CancelFunc
	done           chan struct{}

	mu     sync.RWMutex
	stream *Stream
	keys   []uint64
	watch  watch
	gone   evictions
}

// Subscribe checks cfg against the policy and starts hearing the engine.
func Subscribe(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Allow == nil {
		return nil, errors.New("kvevents: no worker-host policy")
	}
	if cfg.BlockSize < 1 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("kvevents: block size %d out of range", cfg.BlockSize)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	s := &Subscriber{cfg: cfg, done: make(chan struct{}), stream: NewStream(NewSet(cfg.Model, cfg.BlockSize, cfg.MaxBlocks))}
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

// allowed is the tcp:// endpoint to dial for endpoint, past the policy.
func allowed(endpoint string, allow func(string) (string, error)) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Port() == "" || u.Path != "" {
		return "", fmt.Errorf("kvevents: endpoint %q is not tcp://host:port", endpoint)
	}
	addr, err := allow(u.Host)
	if err != nil {
		return "", fmt.Errorf("kvevents: endpoint %s: %w", endpoint, err)
	}
	return "tcp://" + addr, nil
}

// Matched is how many leading blocks of tokens the engine holds now.
func (s *Subscriber) Matched(tokens []uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = s.stream.Set().Keys(s.keys[:0], tokens)
	return s.stream.Set().Matched(s.keys)
}

// MatchedKeys is how many leading blocks of a prompt, given by its keys
// (AppendKeys from Seed of the subscriber's model), the engine holds now.
func (s *Subscriber) MatchedKeys(keys []uint64) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stream.Set().Matched(keys)
}

// EvictedSince reports whether the engine removed any of a prompt's blocks
// (by its keys), or its set was emptied, at or after t: a decision made at
// t whose blocks the set lacks is not waiting for them to be stored.
func (s *Subscriber) EvictedSince(keys []uint64, t time.Time) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gone.since(keys, t)
}

// Trust is whether the set may be routed on now (see Trust).
func (s *Subscriber) Trust() Trust {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.watch.trust(s.cfg.Now(), s.cfg.StaleAfter)
}

// Expect says the engine was just given work that should make it store
// blocks: if it publishes nothing for StaleAfter, the stream is Stale.
func (s *Subscriber) Expect() {
	now := s.cfg.Now()
	s.mu.Lock()
	s.watch.expect(now)
	s.mu.Unlock()
}

// Stats is what the stream has seen so far, and how many blocks the set
// holds.
func (s *Subscriber) Stats() (Stats, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stream.Stats(), s.stream.Set().Len()
}

// Close stops hearing the engine and waits for the subscriber's goroutine.
func (s *Subscriber) Close() {
	s.cancel()
	<-s.done
}

func (s *Subscriber) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		s.hear(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(s.retry()):
		}
	}
}

func (s *Subscriber) retry() time.Duration {
	if s.cfg.Retry > 0 {
		return s.cfg.Retry
	}
	return time.Second
}

// hear reads live batches until the connection or ctx ends.
func (s *Subscriber) hear(ctx context.Context) {
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0))
	defer sub.Close()
	if sub.Dial(s.live) != nil || sub.SetOption(zmq4.OptionSubscribe, "") != nil {
		return
	}
	s.mu.Lock()
	s.stream.Rejoin()
	s.gone.note(s.stream.Set(), s.cfg.Now())
	s.watch.connected, s.watch.expecting = true, time.Time{}
	s.mu.Unlock()
	defer s.disconnected()
	s.catchUp(ctx)
	for {
		msg, err := sub.Recv()
		if err != nil {
			return
		}
		// [topic, sequence, payload]
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			continue
		}
		s.offer(ctx, binary.BigEndian.Uint64(msg.Frames[1]), msg.Frames[2])
	}
}

func (s *Subscriber) disconnected() {
	s.mu.Lock()
	s.watch.connected = false
	s.mu.Unlock()
}

func (s *Subscriber) offer(ctx context.Context, seq uint64, payload []byte) {
	s.mu.Lock()
	from, gap := s.stream.Offer(seq, payload)
	s.watch.replaying = gap
	s.watch.note(s.stream.Stats(), s.cfg.Now(), !gap)
	s.gone.note(s.stream.Set(), s.cfg.Now())
	s.mu.Unlock()
	if !gap {
		return
	}
	if s.replayTo != "" {
		s.replay(ctx, from)
	}
	s.mu.Lock()
	s.stream.EndReplay()
	s.watch.replaying = false
	s.watch.note(s.stream.Stats(), s.cfg.Now(), true)
	s.gone.note(s.stream.Set(), s.cfg.Now())
	s.mu.Unlock()
}

// catchUp replays the engine's kept batches as soon as the subscription is
// made, so the set holds what the engine does before its next live batch
// (an idle engine may publish none for long); the live batches that arrive
// meanwhile wait on the socket. Without a replay socket there is nothing to
// catch up from: the set fills from the live batches.
func (s *Subscriber) catchUp(ctx context.Context) {
	if s.replayTo == "" {
		return
	}
	s.mu.Lock()
	ok := s.stream.CatchUp()
	s.watch.replaying = ok
	s.mu.Unlock()
	if !ok {
		return
	}
	s.replay(ctx, 0)
	s.mu.Lock()
	s.stream.EndCatchUp()
	s.watch.replaying = false
	s.watch.note(s.stream.Stats(), s.cfg.Now(), true)
	s.gone.note(s.stream.Set(), s.cfg.Now())
	s.mu.Unlock()
}

// replay asks the engine for every batch from from and applies what comes
// back, until the end marker, an error or the timeout.
func (s *Subscriber) replay(ctx context.Context, from uint64) {
	timeout := s.cfg.ReplayTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0))
	defer d.Close()
	if d.Dial(s.replayTo) != nil || d.Send(zmq4.NewMsgFrom(nil, seqBytes(from))) != nil {
		return
	}
	for {
		msg, err := d.Recv()
		// ["", sequence, payload]
		if err != nil || len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 || bytes.Equal(msg.Frames[1], endOfReplay) {
			return
		}
		s.mu.Lock()
		s.stream.Replayed(binary.BigEndian.Uint64(msg.Frames[1]), msg.Frames[2])
		s.watch.note(s.stream.Stats(), s.cfg.Now(), false)
		s.gone.note(s.stream.Set(), s.cfg.Now())
		s.mu.Unlock()
	}
}
