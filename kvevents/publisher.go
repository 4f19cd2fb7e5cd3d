package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// DefaultReplayBatches is how many past batches a Publisher keeps for
// replay, as vLLM's publisher does (buffer_steps).
const DefaultReplayBatches = 10_000

// endOfReplay is the sequence number that ends a replay answer.
var endOfReplay = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Publisher is an engine's side of the stream, as vLLM runs it: a PUB socket
// that sends [topic, sequence (8 bytes, big-endian), payload] and a ROUTER
// socket that answers a replay request (a start sequence) with every kept
// batch from there and then [-1, ""]. The simulated worker publishes through
// it, so routers and tests hear events in the engine's own format.
type Publisher struct {
	pub, replay zmq4.Socket
	cancel      context.CancelFunc
	done        chan struct{}
	closeOnce   sync.Once
	closeErr    error

	mu   sync.Mutex
	seq  uint64
	kept []numbered // the last keep batches, oldest first
	keep int
	enc  Encoding
}

// NewPublisher binds the PUB socket at endpoint and, unless replayEndpoint is
// empty, the replay socket there (tcp://host:port; port 0 picks one), keeping
// the last keep batches (DefaultReplayBatches when keep < 1).
func NewPublisher(endpoint, replayEndpoint string, keep int, enc Encoding) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{pub: zmq4.NewPub(ctx), cancel: cancel, done: make(chan struct{}), keep: keep, enc: enc}
	if p.keep < 1 {
		p.keep = DefaultReplayBatches
	}
	if err := p.pub.Listen(endpoint); err != nil {
		p.close()
		return nil, fmt.Errorf("kv events endpoint %s: %w", endpoint, err)
	}
	if replayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.replay = zmq4.NewRouter(ctx)
	if err := p.replay.Listen(replayEndpoint); err != nil {
		p.close()
		return nil, fmt.Errorf("kv events replay endpoint %s: %w", replayEndpoint, err)
	}
	go p.serveReplays()
	return p, nil
}

// Endpoint is where subscribers connect for live batches.
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
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.kept = append(p.kept, numbered{seq, payload})
	if len(p.kept) > p.keep {
		p.kept = p.kept[len(p.kept)-p.keep:]
	}
	return p.pub.Send(zmq4.NewMsgFrom(nil, seqBytes(seq), payload))
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
	p.kept = append(p.kept, numbered{p.seq, payload})
	p.seq++
	if len(p.kept) > p.keep {
		p.kept = p.kept[len(p.kept)-p.keep:]
	}
	return nil
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
	_ = p.replay.Send(zmq4.NewMsgFrom(client, nil, endOfReplay, nil))
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
	err := p.pub.Close()
	if p.replay != nil {
		err = errors.Join(err, p.replay.Close())
	}
	return err
}

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
