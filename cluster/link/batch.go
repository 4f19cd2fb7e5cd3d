package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Batcher puts small items (the placer's questions) to one path of peers
// over Quick's connections, and combines the items that find every connection to a
// peer busy: the next connection to come free carries them all, in one
// round trip. In a burst (every new session of a tier's first instant,
// 32 questions a replica at once) an item then waits for at most the
// round trip ahead of it before it is sent, where one at a time it waits
// for every item ahead of it, a queue of 32 on 4 connections being 8
// round trips, each of them wake-ups on both sides of a loaded host. A
// lone item goes at once, a batch of one. The goroutine of the first item
// waiting carries its batch, so Batcher starts none, as Quick.
type Batcher struct {
	quick *Quick
	path  string
	mu    sync.Mutex
	peers map[string]*batchPeer
	// Waited, when set before the first Put, hears how long an item that
	// found every connection busy waited, until a batch took it or its
	// deadline passed.
	Waited func(time.Duration)
	// Carried, when set before the first Put, hears how many items each
	// batch sent carries.
	Carried func(int)
}

const (
	// MaxBatchItems bounds the items of a batch, on the wire and in the
	// carrier's hands.
	MaxBatchItems = 64
	// maxBatchBytes bounds what a batch carries, so it stays under the
	// cluster port's body bound (64 KiB); an item larger than this goes
	// alone.
	maxBatchBytes = 48 << 10
	// batchWireVersion is the first byte of a batch and of its answers.
	batchWireVersion = 1
)

// batchPeer is one peer's items: the connections carrying batches, and the
// items waiting for one, oldest first.
type batchPeer struct {
	busy    int
	waiting []*batchItem
}

type batchItem struct {
	body     []byte
	deadline time.Time
	since    time.Time      // when it began to wait
	wake     chan batchWake // buffered: the one message a waiting item gets
}

// batchWake is what a waiting item is told: to carry a batch (itself
// first), or its answer.
type batchWake struct {
	carry []*batchItem
	BatchAnswer
	err error
}

// BatchAnswer is the peer's answer to one item: an HTTP status and a body.
type BatchAnswer struct {
	Status int
	Body   []byte
}

// NewBatcher returns a Batcher that puts items to path on peers dialled
// through port.
func NewBatcher(port *Port, path string) *Batcher {
	return &Batcher{quick: NewQuick(port), path: path, peers: map[string]*batchPeer{}}
}

// Close closes the idle connections; a Batcher closed puts no more items.
func (b *Batcher) Close() { b.quick.Close() }

// Put sends item to the Batcher's path on the replica whose cluster port is
// addr, alone or with others, and returns the peer's answer to it, all
// before deadline. A batch the peer refused whole (a status other than
// 200) is that answer for each of its items.
func (b *Batcher) Put(addr string, item []byte, deadline time.Time) (BatchAnswer, error) {
	it := &batchItem{body: item, deadline: deadline}
	b.mu.Lock()
	p := b.peer(addr)
	if p.busy < maxQuickConns {
		p.busy++
		b.mu.Unlock()
		return b.carry(addr, p, []*batchItem{it})
	}
	it.since, it.wake = time.Now(), make(chan batchWake, 1)
	p.waiting = append(p.waiting, it)
	b.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case w := <-it.wake:
		return b.woken(addr, p, w)
	case <-timer.C:
	}
	b.mu.Lock()
	left := p.drop(it)
	b.mu.Unlock()
	if !left {
		return b.woken(addr, p, <-it.wake) // a batch took it: its message is on the way
	}
	b.waited(time.Since(it.since))
	return BatchAnswer{}, errNoConnection(addr)
}

func errNoConnection(addr string) error {
	return fmt.Errorf("no connection to %s free before the deadline: %w", addr, os.ErrDeadlineExceeded)
}

func (b *Batcher) peer(addr string) *batchPeer {
	p, ok := b.peers[addr]
	if !ok {
		p = &batchPeer{}
		b.peers[addr] = p
	}
	return p
}

// drop takes it out of the waiting items, and reports whether it was
// there.
func (p *batchPeer) drop(it *batchItem) bool {
	i := slices.Index(p.waiting, it)
	if i < 0 {
		return false
	}
	p.waiting = slices.Delete(p.waiting, i, i+1) // clears the freed end
	return true
}

func (b *Batcher) woken(addr string, p *batchPeer, w batchWake) (BatchAnswer, error) {
	if w.carry != nil {
		return b.carry(addr, p, w.carry)
	}
	return w.BatchAnswer, w.err
}

// carry sends batch (the caller's item first) on a connection the caller
// holds, tells the others their answers, hands the connection to the items
// that waited meanwhile, and returns the caller's answer.
func (b *Batcher) carry(addr string, p *batchPeer, batch []*batchItem) (BatchAnswer, error) {
	if b.Carried != nil {
		b.Carried(len(batch))
	}
	answers, err := b.roundTrip(addr, batch)
	for i, it := range batch[1:] {
		w := batchWake{err: err}
		if err == nil {
			w.BatchAnswer = answers[i+1]
		}
		it.wake <- w
	}
	b.handOff(addr, p)
	if err != nil {
		return BatchAnswer{}, err
	}
	return answers[0], nil
}

// roundTrip puts batch to the peer, by the latest of its items' deadlines
// (the items are at most a round trip apart, and each was still in time
// when it was taken), and reads an answer for each.
func (b *Batcher) roundTrip(addr string, batch []*batchItem) ([]BatchAnswer, error) {
	deadline := batch[0].deadline
	items := make([][]byte, len(batch))
	for i, it := range batch {
		items[i] = it.body
		if it.deadline.After(deadline) {
			deadline = it.deadline
		}
	}
	status, body, err := b.quick.Post(addr, b.path, AppendBatch(nil, items), deadline)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		answers := make([]BatchAnswer, len(batch))
		for i := range answers {
			answers[i] = BatchAnswer{Status: status, Body: body}
		}
		return answers, nil
	}
	return ParseBatchAnswers(body, len(batch))
}

// handOff gives the connection a batch has just freed to the items that
// waited for one: the oldest carries as many as a batch takes. Items past
// their deadline are told so.
func (b *Batcher) handOff(addr string, p *batchPeer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var batch []*batchItem
	size, kept := 0, 0
	for _, it := range p.waiting {
		switch {
		case !now.Before(it.deadline):
			b.waited(now.Sub(it.since))
			it.wake <- batchWake{err: errNoConnection(addr)}
		case len(batch) == 0 || len(batch) < MaxBatchItems && size+len(it.body) <= maxBatchBytes:
			b.waited(now.Sub(it.since))
			batch = append(batch, it)
			size += len(it.body)
		default:
			p.waiting[kept] = it
			kept++
		}
	}
	clear(p.waiting[kept:])
	p.waiting = p.waiting[:kept]
	if len(batch) == 0 {
		p.busy--
		return
	}
	batch[0].wake <- batchWake{carry: batch}
}

func (b *Batcher) waited(d time.Duration) {
	if b.Waited != nil {
		b.Waited(d)
	}
}

// The batch wire: a version byte, the count of items, and each item as its
// length and bytes; its answer, the same with each item's status before
// its length.

// ErrBadBatch marks a batch or answers that cannot be read.
var ErrBadBatch = errors.New("link: malformed batch")

// AppendBatch appends the encoding of items to dst.
func AppendBatch(dst []byte, items [][]byte) []byte {
	dst = append(dst, batchWireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, it := range items {
		dst = binary.AppendUvarint(dst, uint64(len(it)))
		dst = append(dst, it...)
	}
	return dst
}

// ParseBatch reads the items AppendBatch wrote, at most MaxBatchItems;
// they alias b.
func ParseBatch(b []byte) ([][]byte, error) {
	r := batchReader{b: b}
	n := r.head(MaxBatchItems)
	var items [][]byte
	for range n {
		if it := r.bytes(); r.err == nil {
			items = append(items, it)
		}
	}
	return items, r.end()
}

// AppendBatchAnswers appends the encoding of answers to dst.
func AppendBatchAnswers(dst []byte, answers []BatchAnswer) []byte {
	dst = append(dst, batchWireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(answers)))
	for _, a := range answers {
		dst = binary.AppendUvarint(dst, uint64(a.Status))
		dst = binary.AppendUvarint(dst, uint64(len(a.Body)))
		dst = append(dst, a.Body...)
	}
	return dst
}

// ParseBatchAnswers reads the answers AppendBatchAnswers wrote, exactly
// want of them (one for each item put); they alias b.
func ParseBatchAnswers(b []byte, want int) ([]BatchAnswer, error) {
	r := batchReader{b: b}
	if n := r.head(MaxBatchItems); r.err == nil && n != want {
		r.fail("%d answers for %d items", n, want)
	}
	answers := make([]BatchAnswer, 0, want)
	for r.err == nil && len(answers) < want {
		status := r.uvarint(599)
		if r.err == nil && status < 100 {
			r.fail("status %d", status)
		}
		if body := r.bytes(); r.err == nil {
			answers = append(answers, BatchAnswer{Status: int(status), Body: body})
		}
	}
	return answers, r.end()
}

// ServeBatch answers a batch that Batcher put, each item with each's
// answer; a batch that cannot be read is refused whole (400).
func ServeBatch(ctx *fasthttp.RequestCtx, each func(item []byte) BatchAnswer) {
	items, err := ParseBatch(ctx.PostBody())
	if err != nil {
		ctx.Error(err.Error(), http.StatusBadRequest)
		return
	}
	answers := make([]BatchAnswer, len(items))
	for i, it := range items {
		answers[i] = each(it)
	}
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(AppendBatchAnswers(nil, answers))
}

// batchReader reads the batch wire, keeping the first error.
type batchReader struct {
	b   []byte
	err error
}

func (r *batchReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadBatch, fmt.Sprintf(format, args...))
	}
}

// head reads the version and the count, at most limit.
func (r *batchReader) head(limit uint64) int {
	if len(r.b) == 0 || r.b[0] != batchWireVersion {
		r.fail("not a batch of version %d", batchWireVersion)
		return 0
	}
	r.b = r.b[1:]
	return int(r.uvarint(limit))
}

func (r *batchReader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.fail("truncated varint")
		return 0
	case v > limit:
		r.fail("%d above the bound %d", v, limit)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a length and that many bytes.
func (r *batchReader) bytes() []byte {
	n := r.uvarint(maxBatchBytes << 1)
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("%d bytes announced, %d left", n, len(r.b))
	}
	if r.err != nil {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *batchReader) end() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes past the end", len(r.b))
	}
	return r.err
}
