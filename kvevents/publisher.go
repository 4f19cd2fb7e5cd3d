package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// DefaultReplayBatches is how many past batches a Publisher keeps for
// replay, as vLLM's publisher does (buffer_steps).
const DefaultReplayBatches = 10_000

// Publisher is an engine's side of the stream, as vLLM runs it: a PUB socket
// that sends [topic, sequence (8 bytes, big-endian), payload] and a ROUTER
// socket that answers a replay request (a start sequence) with every kept
// batch from there and then [-1, ""]. The simulated worker publishes through
// it, so routers and tests hear events in the engine's own format.
type Publisher struct {
	pub, replay zmq4.Socket
	dialer      *dialPub // the PUB side when it dials (Connect), instead of pub
	cancel      context.CancelFunc
	done        chan struct{}
	dialed      chan struct{} // closed once a dial-out connection is made, or given up
	closeOnce   sync.Once
	closeErr    error
	topic       []byte

	mu   sync.Mutex
	seq  uint64
	kept []numbered // the last keep batches, oldest first
	keep int
	enc  Encoding
}

// PublisherConfig is an engine's side of its KV events.
type PublisherConfig struct {
	// Endpoint is where live batches go, tcp://host:port: bound (port 0
	// picks one), or dialed when Connect is set, as vLLM dials an endpoint
	// that is not a wildcard (a router's bound socket, --kv-events-bind),
	// retrying and reconnecting on its own.
	Endpoint string
	Connect  bool
	// ReplayEndpoint, unless empty, is where the replay socket binds.
	ReplayEndpoint string
	// Keep is how many batches are kept for replay (DefaultReplayBatches
	// when < 1).
	Keep int
	// Encoding is the batches' msgpack layout.
	Encoding Encoding
	// Topic is every message's first frame (llm-d names the engine there:
	// kv@<host>@<model>; vLLM's default is empty).
	Topic string
}

// NewPublisher starts an engine's sockets as cfg says.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cancel: cancel, done: make(chan struct{}), dialed: make(chan struct{}), keep: cfg.Keep,
		enc: cfg.Encoding, topic: []byte(cfg.Topic)}
	if p.keep < 1 {
		p.keep = DefaultReplayBatches
	}
	if err := p.open(ctx, cfg); err != nil {
		p.close()
		return nil, err
	}
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.replay = zmq4.NewRouter(ctx)
	if err := p.replay.Listen(cfg.ReplayEndpoint); err != nil {
		p.close()
		return nil, fmt.Errorf("kv events replay endpoint %s: %w", cfg.ReplayEndpoint, err)
	}
	go p.serveReplays()
	return p, nil
}

// open binds the PUB socket, or starts dialing it out.
func (p *Publisher) open(ctx context.Context, cfg PublisherConfig) error {
	if !cfg.Connect {
		close(p.dialed)
		p.pub = zmq4.NewPub(ctx)
		if err := p.pub.Listen(cfg.Endpoint); err != nil {
			return fmt.Errorf("kv events endpoint %s: %w", cfg.Endpoint, err)
		}
		return nil
	}
	// Dialing goes through a PUB of this package's own rather than
	// go-zeromq's, whose reconnection can deadlock a publisher whose
	// subscriber went away mid-send, and which drops what is published
	// while it reconnects where vLLM's (libzmq) keeps it.
	close(p.dialed)
	addr, ok := strings.CutPrefix(cfg.Endpoint, "tcp://")
	if !ok {
		return fmt.Errorf("kv events endpoint %s: want tcp://host:port", cfg.Endpoint)
	}
	p.dialer = newDialPub(addr)
	return nil
}

// Endpoint is where subscribers connect for live batches (a bound socket's
// address).
func (p *Publisher) Endpoint() string { return "tcp://" + p.pub.Addr().String() }

// ReplayEndpoint is where subscribers ask for missed batches; empty without
// a replay socket.
func (p *Publisher) ReplayEndpoint() string {
	if p.replay == nil {
		return ""
	}
	return "tcp://" + p.replay.Addr().String()
}

// Publish numbers b, keeps it for replay and sends it to every subscriber.
// A subscriber that is not connected misses it, as on a real engine.
func (p *Publisher) Publish(b Batch) error {
	payload, err := Encode(b, p.enc)
	if err != nil {
		return err
	}
	return p.PublishRaw(payload)
}

// PublishRaw numbers payload as a batch, keeps it for replay and sends it
// as it is: Publish's last step, and what a broken or hostile engine sends
// (a payload that is no batch), for the faults and the tests.
func (p *Publisher) PublishRaw(payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.keepLocked(payload)
	if p.dialer != nil {
		p.dialer.send(p.topic, seqBytes(seq), payload)
		return nil
	}
	return p.pub.Send(zmq4.NewMsgFrom(p.topic, seqBytes(seq), payload))
}

// Withhold numbers b and keeps it for replay without sending it: a batch a
// stalled socket dropped. The subscribers see the gap at the next batch sent.
func (p *Publisher) Withhold(b Batch) error {
	payload, err := Encode(b, p.enc)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keepLocked(payload)
	return nil
}

// Next is the sequence number the next batch will carry: a subscriber
// whose next expected number has reached it has heard every batch so far.
func (p *Publisher) Next() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// keepLocked numbers payload and keeps it for replay; under mu.
func (p *Publisher) keepLocked(payload []byte) uint64 {
	seq := p.seq
	p.seq++
	p.kept = append(p.kept, numbered{seq, payload})
	if len(p.kept) > p.keep {
		p.kept = p.kept[len(p.kept)-p.keep:]
	}
	return seq
}

// Forget drops every kept batch, as an engine that restarted has none.
func (p *Publisher) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept = nil
}

// Restart numbers the next batch 0 again, as a restarted engine does.
func (p *Publisher) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq, p.kept = 0, nil
}

func (p *Publisher) serveReplays() {
	defer close(p.done)
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			return
		}
		// [identity, "", start sequence]
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		p.answer(msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2]))
	}
}

func (p *Publisher) answer(client []byte, from uint64) {
	p.mu.Lock()
	kept := append([]numbered(nil), p.kept...)
	p.mu.Unlock()
	for _, b := range kept {
		if b.seq >= from {
			if p.replay.Send(zmq4.NewMsgFrom(client, nil, seqBytes(b.seq), b.payload)) != nil {
				return
			}
		}
	}
	_ = p.replay.Send(zmq4.NewMsgFrom(client, nil, endOfReplay[:], nil))
}

// Close stops the sockets and the replay server. Idempotent.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closeErr = p.close()
		<-p.done
	})
	return p.closeErr
}

func (p *Publisher) close() error {
	p.cancel()
	<-p.dialed
	var err error
	if p.dialer != nil {
		p.dialer.close()
	} else if p.pub != nil {
		err = p.pub.Close()
	}
	if p.replay != nil {
		err = errors.Join(err, p.replay.Close())
	}
	return err
}

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
