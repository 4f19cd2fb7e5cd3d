package bodyintake

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// Budget bounds the bytes of request bodies the router holds at once
// (--max-buffered-body-bytes). A body takes its share as it arrives
// (intake.go), not as it was announced, and gives it back when the
// handler returns (its answer written, or its stream started). A body of
// no length that grows past a pooled buffer is charged with the buffer it
// leaves until the copy is done, so that the budget bounds the memory of
// such bodies, not only their sizes.
//
// The budget is shared fairly between clients: one key when the API takes
// keys, else one address (an IPv6 one by its /64), whatever its
// connections. A client may use what the others leave, but it keeps no
// more than --max-body-share of the budget while another client needs
// room: when a body cannot grow for want of room, the budget cuts the
// largest body still being read of a client over its share (503, its
// connection closed), and the growth waits for the room that frees, up to
// maxRoomWait. Bodies already read are never cut: they are being served.
type Budget struct {
	limit int64 // --max-buffered-body-bytes
	share int64 // what one client keeps while others need room
	held  atomic.Int64

	mu      sync.Mutex
	clients map[Client]int64  // a client's bytes, while it holds any
	reading map[*Intake]int64 // the bodies being read, which may be cut, and their buffers' sizes
	freed   chan struct{}     // closed, and replaced, when bytes are given back while growths wait
	waiting bool              // a growth waits on freed
}

// maxRoomWait bounds how long a growth waits for the room a cut frees.
const maxRoomWait = time.Second

// Client is who a body is charged to.
type Client struct {
	ID   credential.ID // the key's identity, or the address in its first bytes
	Addr bool          // ID holds an address
}

// NewBudget is a budget of limit bytes (--max-buffered-body-bytes) of which
// a client keeps share (--max-body-share, a fraction) while others need
// room.
func NewBudget(limit int64, share float64) *Budget {
	return &Budget{limit: limit, share: int64(share * float64(limit)), clients: map[Client]int64{},
		reading: map[*Intake]int64{}, freed: make(chan struct{})}
}

// grow takes what in needs to go from a buffer of from bytes to one of to
// (from is 0 for its first). transient: the old buffer stays charged
// until release(from).
func (b *Budget) grow(in *Intake, from, to int64, transient bool) error {
	need := to - from
	if transient {
		need = to
	}
	if in.want < 0 && (to > b.limit || transient && from+to > b.limit) {
		return failure.Errorf(failure.ErrTooLarge, "a body of unknown length takes its buffer and the next, twice as large, while it grows: "+
			"past %d bytes it needs more than the router's %d (--max-buffered-body-bytes); send a Content-Length", from, b.limit)
	}
	freed, err := b.tryGrow(in, from, to, need)
	if freed == nil {
		return err
	}
	return b.await(in, from, to, need, freed)
}

// await waits, up to maxRoomWait, for the room a cut frees, and charges
// in's growth once there is.
func (b *Budget) await(in *Intake, from, to, need int64, freed <-chan struct{}) error {
	wait := time.NewTimer(maxRoomWait)
	defer wait.Stop()
	for freed != nil {
		select {
		case <-freed:
		case <-wait.C:
			return b.full()
		}
		var err error
		if freed, err = b.tryGrow(in, from, to, need); freed == nil {
			return err
		}
	}
	return nil
}

// tryGrow charges in's growth if there is room; else it cuts a body of a
// client over its share, when there is one and in's client is not over
// its own, and returns the channel to wait on for the room it frees.
func (b *Budget) tryGrow(in *Intake, from, to, need int64) (<-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := b.clients[in.client] - from + to
	if b.held.Load()+need <= b.limit {
		b.held.Add(need)
		b.clients[in.client] = mine
		b.reading[in] = to
		return nil, nil
	}
	if mine > b.share {
		return nil, failure.Errorf(failure.ErrBodiesHeld, "no room for more of this client's request bodies: it holds more than its share "+
			"(--max-body-share) of the router's %d bytes (--max-buffered-body-bytes) while others need it; retry shortly", b.limit)
	}
	victim := b.overShare(in.client)
	if victim == nil {
		return nil, b.full()
	}
	victim.cut()
	b.waiting = true
	return b.freed, nil
}

// overShare is the largest body being read of a client, other than c,
// that holds more than its share; nil when there is none.
func (b *Budget) overShare(c Client) *Intake {
	var largest *Intake
	for in, size := range b.reading {
		if in.client != c && b.clients[in.client] > b.share && (largest == nil || size > b.reading[largest]) {
			largest = in
		}
	}
	return largest
}

func (b *Budget) full() error {
	return failure.Errorf(failure.ErrBodiesHeld, "the router holds %d bytes of request bodies, its limit (--max-buffered-body-bytes); retry shortly",
		b.limit)
}

// release gives back the transient charge of a buffer a growth replaced.
func (b *Budget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held.Add(-n)
	b.wake()
}

// done says in's body was read whole, or failed: it can no longer be cut.
func (b *Budget) done(in *Intake) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.reading, in)
}

// Give gives back a client's body of n bytes.
func (b *Budget) Give(c Client, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held.Add(-n)
	if b.clients[c] -= n; b.clients[c] <= 0 {
		delete(b.clients, c)
	}
	b.wake()
}

// wake tells the growths waiting for room that some freed (each looks
// again, and waits again if it must). b.mu is held.
func (b *Budget) wake() {
	if b.waiting {
		close(b.freed)
		b.freed, b.waiting = make(chan struct{}), false
	}
}

// Held is the bytes of request bodies held now.
func (b *Budget) Held() int64 { return b.held.Load() }
