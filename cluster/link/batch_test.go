package link

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// batchesSeen records how many items each batch carried.
type batchesSeen struct {
	mu    sync.Mutex
	sizes []int
}

func (s *batchesSeen) record(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes = append(s.sizes, n)
}

func (s *batchesSeen) seen() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// batcherPeer is a Batcher and the address of a peer that answers every
// item of a batch with "echo " and the item, once hold returns.
func batcherPeer(t *testing.T, hold func()) (*Batcher, string, *batchesSeen) {
	t.Helper()
	seen := &batchesSeen{}
	q, addr := questionPeer(t, func(ctx *fasthttp.RequestCtx) {
		hold()
		items, _ := ParseBatch(ctx.PostBody())
		seen.record(len(items))
		ServeBatch(ctx, func(item []byte) BatchAnswer {
			return BatchAnswer{Status: http.StatusOK, Body: append([]byte("echo "), item...)}
		})
	})
	return &Batcher{quick: q, path: "/q", peers: map[string]*batchPeer{}}, addr, seen
}

func (b *Batcher) waitingFor(addr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.peers[addr]; ok {
		return len(p.waiting)
	}
	return 0
}

// TestBatcherSendsTheItemsThatFoundEveryConnectionBusyInOneRoundTrip: 32
// items at once; the first maxQuickConns take a connection each, alone,
// and the peer holds them until the other 28 are waiting. The first
// connection to come free carries those 28 in one batch, and every item
// gets its own answer.
func TestBatcherSendsTheItemsThatFoundEveryConnectionBusyInOneRoundTrip(t *testing.T) {
	const n = 32
	var inside atomic.Int32
	release := make(chan struct{})
	b, addr, seen := batcherPeer(t, func() {
		if inside.Add(1) <= maxQuickConns {
			<-release
		}
	})
	var waited, carried atomic.Int32
	b.Waited = func(time.Duration) { waited.Add(1) }
	b.Carried = func(int) { carried.Add(1) }
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item := fmt.Append(nil, "item ", i)
			a, err := b.Put(addr, item, time.Now().Add(time.Minute))
			if err != nil || a.Status != http.StatusOK || !bytes.Equal(a.Body, append([]byte("echo "), item...)) {
				t.Errorf("item %d: %d %q %v", i, a.Status, a.Body, err)
			}
		}()
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return b.waitingFor(addr) == n-maxQuickConns },
		"%d items waiting behind %d busy connections", n-maxQuickConns, maxQuickConns)
	close(release)
	wg.Wait()
	sizes := seen.seen()
	slices.Sort(sizes)
	want := []int{1, 1, 1, 1, n - maxQuickConns}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("the peer got batches of %v items, want %v", sizes, want)
	}
	if waited.Load() != n-maxQuickConns || int(carried.Load()) != len(want) {
		t.Errorf("Waited heard %d items, Carried %d batches; want %d and %d", waited.Load(), carried.Load(), n-maxQuickConns, len(want))
	}
	if w := b.waitingFor(addr); w != 0 {
		t.Errorf("%d items still waiting", w)
	}
}

// TestBatcherGivesUpOnAnItemAtItsDeadlineWhileEveryConnectionIsBusy: an
// item that finds every connection busy is not waited for past its
// deadline, and leaves no trace for a later batch to carry.
func TestBatcherGivesUpOnAnItemAtItsDeadlineWhileEveryConnectionIsBusy(t *testing.T) {
	var inside atomic.Int32
	busy, release := make(chan struct{}), make(chan struct{})
	b, addr, seen := batcherPeer(t, func() {
		if inside.Add(1) == maxQuickConns {
			close(busy)
		}
		<-release
	})
	var wg sync.WaitGroup
	for range maxQuickConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Put(addr, []byte("held"), time.Now().Add(time.Minute)); err != nil {
				t.Error(err)
			}
		}()
	}
	<-busy
	_, err := b.Put(addr, []byte("late"), time.Now().Add(20*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an item behind busy connections past its deadline: %v, want a deadline error", err)
	}
	if w := b.waitingFor(addr); w != 0 {
		t.Errorf("%d items still waiting after their deadline", w)
	}
	close(release)
	wg.Wait()
	if sizes := seen.seen(); len(sizes) != maxQuickConns {
		t.Errorf("the peer got batches of %v items, want the %d held alone and not the late one", sizes, maxQuickConns)
	}
}

// TestABatchRefusedWholeIsEachItemsAnswer: a peer that refuses the batch
// (it does not serve the path, or no longer holds the role) gives every
// item that status.
func TestABatchRefusedWholeIsEachItemsAnswer(t *testing.T) {
	q, addr := questionPeer(t, func(ctx *fasthttp.RequestCtx) { ctx.Error("not here", http.StatusConflict) })
	b := &Batcher{quick: q, path: "/q", peers: map[string]*batchPeer{}}
	a, err := b.Put(addr, []byte("x"), time.Now().Add(10*time.Second))
	if err != nil || a.Status != http.StatusConflict || string(a.Body) != "not here" {
		t.Errorf("a batch refused whole: %d %q %v, want 409 \"not here\"", a.Status, a.Body, err)
	}
}

// TestTheBatchWireReadsWhatItWroteAndRefusesTheRest: items and answers
// come back as written; a batch or answers that cannot be read are
// refused, whatever the fault, before anything is allocated for counts
// past the bound.
func TestTheBatchWireReadsWhatItWroteAndRefusesTheRest(t *testing.T) {
	items := [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{7}, 300)}
	got, err := ParseBatch(AppendBatch(nil, items))
	if err != nil || fmt.Sprint(got) != fmt.Sprint(items) {
		t.Fatalf("ParseBatch: %v %v, want %v", got, err, items)
	}
	answers := []BatchAnswer{{Status: 200, Body: []byte("p")}, {Status: 409, Body: []byte("no")}}
	back, err := ParseBatchAnswers(AppendBatchAnswers(nil, answers), len(answers))
	if err != nil || fmt.Sprint(back) != fmt.Sprint(answers) {
		t.Fatalf("ParseBatchAnswers: %v %v, want %v", back, err, answers)
	}
	good := AppendBatch(nil, items)
	for name, b := range map[string][]byte{
		"empty":           nil,
		"other version":   append([]byte{2}, good[1:]...),
		"truncated":       good[:len(good)-1],
		"bytes past end":  append(good, 0),
		"too many items":  AppendBatch(nil, make([][]byte, MaxBatchItems+1)),
		"length past end": {batchWireVersion, 1, 5, 'a'},
	} {
		if _, err := ParseBatch(b); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: ParseBatch %v, want ErrBadBatch", name, err)
		}
	}
	goodAnswers := AppendBatchAnswers(nil, answers)
	for name, b := range map[string][]byte{
		"fewer answers than items": AppendBatchAnswers(nil, answers[:1]),
		"status below 100":         AppendBatchAnswers(nil, []BatchAnswer{{Status: 42}, answers[1]}),
		"status above 599":         AppendBatchAnswers(nil, []BatchAnswer{{Status: 600}, answers[1]}),
		"truncated":                goodAnswers[:len(goodAnswers)-1],
	} {
		if _, err := ParseBatchAnswers(b, len(answers)); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: ParseBatchAnswers %v, want ErrBadBatch", name, err)
		}
	}
}

// FuzzParseBatch: whatever a peer sends, reading it as a batch or as
// answers returns an error or what, written again, reads back the same.
func FuzzParseBatch(f *testing.F) {
	f.Add(AppendBatch(nil, [][]byte{[]byte("a"), {}}))
	f.Add(AppendBatchAnswers(nil, []BatchAnswer{{Status: 200, Body: []byte("p")}}))
	f.Add([]byte{batchWireVersion, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if items, err := ParseBatch(b); err == nil {
			again, err := ParseBatch(AppendBatch(nil, items))
			if err != nil || fmt.Sprint(again) != fmt.Sprint(items) {
				t.Errorf("items %q read back as %q, %v", items, again, err)
			}
		}
		if answers, err := ParseBatchAnswers(b, 1); err == nil {
			again, err := ParseBatchAnswers(AppendBatchAnswers(nil, answers), 1)
			if err != nil || fmt.Sprint(again) != fmt.Sprint(answers) {
				t.Errorf("answers %v read back as %v, %v", answers, again, err)
			}
		}
	})
}
