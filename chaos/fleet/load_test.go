//go:build chaos

package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The load: agentic sessions, each a conversation that grows by a tool call and its output on
// every turn and resends the whole of it (streamed, as agents do), 6-10 turns, then a new
// session takes its place. Every turn goes to a replica picked at random among those the load
// balancer holds up (the test marks a replica down when it kills or restarts it, as a health
// check would), so a session's turns cross replicas and stay on their worker only if the tier
// agrees where the session lives.
//
// What is counted:
//   - requests: turns answered (a 200 whose stream ended with [DONE]);
//   - failed: attempts that failed visibly (an error status, an SSE error event, a read error
//     such as a connection reset mid-stream), then retried whole on another replica; of those,
//     failedOnKilled met a kill: the replica was killed while they were in flight, or they were
//     sent to it between its kill and the balancer's taking it out. Dials that fail (refused, or
//     timed out to a dead address) are not counted: nothing was sent, the client goes on;
//   - silentCuts: streams that ended cleanly without [DONE] and without an error: never allowed;
//   - follow-ups: turns after a session's first; one stays when the worker that answered it
//     (x-worker-id) is the one that answered the session's previous turn. A follow-up whose
//     previous worker was removed from the registry (before it was sent, or while it was in
//     flight) is not counted (excluded) and the session continues from wherever it landed.
type loadStats struct {
	requests, failed, failedOnKilled, silentCuts, refused int64
	followUps, stayed, excluded                           int64
	crossReplica, movedCross                              int64    // follow-ups sent through another replica than the previous turn; of those, moved
	errs, killedErrs                                      []string // what failed outside a killed replica, and on one
}

func (s loadStats) stayShare() float64 {
	if s.followUps == 0 {
		return 0
	}
	return float64(s.stayed) / float64(s.followUps)
}

// fleetState is what the load balancer and the counting need to know of the faults.
type fleetState struct {
	mu       sync.Mutex
	down     map[string]bool   // replicas the balancer skips
	killGen  map[string]int    // replica -> how many times it was killed (SIGKILL)
	dead     map[string]bool   // replicas killed and not yet back (ready again)
	removed  map[string]int    // worker id (x-worker-id) -> removal generation, while removed
	remGen   int               // bumped on every removal
	inflight map[string]*int64 // replica -> streams in flight
	onWorker map[string]int    // worker id (x-worker-id) -> streams in flight on it
	// onDown runs when a replica is taken out: the balancer drops its idle connections, as a
	// proxy drains a host it took out (one pooled to a killed process would fail the next request).
	onDown func()
}

func newFleetState() *fleetState {
	f := &fleetState{down: map[string]bool{}, killGen: map[string]int{}, dead: map[string]bool{}, removed: map[string]int{}, inflight: map[string]*int64{},
		onWorker: map[string]int{}}
	for _, n := range replicaNames {
		f.inflight[n] = new(int64)
	}
	return f
}

func (f *fleetState) setDown(n string, down bool) {
	f.mu.Lock()
	f.down[n] = down
	if !down {
		delete(f.dead, n)
	}
	f.mu.Unlock()
	if down && f.onDown != nil {
		f.onDown()
	}
}

// killing records that replica n is about to be killed: whatever is in flight on it from now
// on may fail. It is recorded before the signal is sent, since its connections break before
// docker kill returns.
func (f *fleetState) killing(n string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killGen[n]++
	f.dead[n] = true
}

// onKilled reports whether an attempt on n that started at kill generation gen met a kill:
// n was killed since, or is dead now (sent there between the kill and the balancer's
// taking it out).
func (f *fleetState) onKilled(n string, gen int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.killGen[n] != gen || f.dead[n]
}

func (f *fleetState) gen(n string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.killGen[n]
}

func (f *fleetState) remove(workers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remGen++
	for _, w := range workers {
		f.removed[w] = f.remGen
	}
}

// readd ends the workers' removal.
func (f *fleetState) readd(workers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range workers {
		delete(f.removed, w)
	}
	f.remGen++
}

// streaming counts a stream in flight on worker w (add 1) or one that ended (add -1).
func (f *fleetState) streaming(w string, add int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onWorker[w] += add
}

// streamsOn is the number of streams in flight on worker w.
func (f *fleetState) streamsOn(w string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.onWorker[w]
}

// busiestWorker is the worker with the most streams in flight, and how many.
func (f *fleetState) busiestWorker() (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	best, most := "", 0
	for w, n := range f.onWorker {
		if n > most {
			best, most = w, n
		}
	}
	return best, most
}

func (f *fleetState) snapshot() (up []string, remGen int, removed map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	removed = map[string]bool{}
	for w := range f.removed {
		removed[w] = true
	}
	for _, n := range replicaNames {
		if !f.down[n] {
			up = append(up, n)
		}
	}
	return up, f.remGen, removed
}

type load struct {
	fleet  *fleetState
	stop   chan struct{}
	wg     sync.WaitGroup
	client *http.Client
	maxTok int
	think  time.Duration

	requests, failed, failedOnKilled, silentCuts, refused atomic.Int64
	followUps, stayed, excluded                           atomic.Int64
	crossReplica, movedCross                              atomic.Int64
	errMu                                                 sync.Mutex
	errs, killedErrs                                      []string
}

func startLoad(fleet *fleetState, sessions int, think time.Duration, maxTokens int) *load {
	l := &load{fleet: fleet, stop: make(chan struct{}), think: think, maxTok: maxTokens,
		client: &http.Client{Timeout: 60 * time.Second, Transport: newTransport()}}
	fleet.onDown = l.client.CloseIdleConnections
	for i := range sessions {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for s := 0; ; s++ {
				if !l.session(rng, fmt.Sprintf("agent %d.%d", i, s)) {
					return
				}
			}
		}()
	}
	return l
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

var systemPrompt = strings.Repeat("You are a coding agent with tools: read_file, run_tests, edit_file, search. Be terse. ", 24)

var vocabulary = strings.Fields("the test fails because the handler returns early when the queue is empty and the worker " +
	"never sees the retry so the counter stays at zero while the scheduler waits for a slot that was freed by a " +
	"request which already timed out in the pool of connections kept per replica")

// words is about n bytes of text drawn from rng.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		b.WriteByte(' ')
	}
	return b.String()
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// session runs one agentic session to its last turn; false when the load was stopped.
func (l *load) session(rng *rand.Rand, name string) bool {
	// The shape of loadgen agentic's sessions (sim/workload), a quarter of its size: a system
	// prompt every session shares (2 KB), a task of the session's own (1 KB, four blocks of
	// routing text), then per turn an answer and a tool's output (about 1 KB).
	msgs := []message{
		{Role: "system", Content: systemPrompt},
		{Role: "user", Content: fmt.Sprintf("Task of %s: %s", name, words(rng, 1024))},
	}
	turns := 6 + rng.IntN(5)
	last, lastReplica := "", ""
	for turn := range turns {
		if l.stopped() {
			return false
		}
		worker, replica, removedAcross, ok := l.turn(rng, msgs)
		if !ok {
			return false
		}
		if turn > 0 {
			switch {
			case removedAcross[last]:
				l.excluded.Add(1)
			default:
				l.followUps.Add(1)
				if replica != lastReplica {
					l.crossReplica.Add(1)
				}
				if worker == last {
					l.stayed.Add(1)
				} else if replica != lastReplica {
					l.movedCross.Add(1)
				}
			}
		}
		last, lastReplica = worker, replica
		msgs = append(msgs,
			message{Role: "assistant", Content: fmt.Sprintf("Turn %d: calling run_tests. %s", turn, words(rng, 128))},
			message{Role: "user", Content: fmt.Sprintf("Tool output of turn %d: %s", turn, words(rng, 512+rng.IntN(512)))})
		time.Sleep(l.think)
	}
	return true
}

// turn sends one turn until a replica answers it whole; it returns the worker that answered
// and the workers that were removed at any moment of the turn.
func (l *load) turn(rng *rand.Rand, msgs []message) (string, string, map[string]bool, bool) {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "messages": msgs, "max_tokens": l.maxTok, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	_, _, removedAtStart := l.fleet.snapshot()
	deadline := time.Now().Add(90 * time.Second)
	for attempt := 0; ; attempt++ {
		if l.stopped() && attempt > 0 {
			return "", "", nil, false
		}
		up, _, _ := l.fleet.snapshot()
		if len(up) == 0 || time.Now().After(deadline) {
			l.note("no replica answered within 90 s")
			return "", "", nil, false
		}
		n := up[rng.IntN(len(up))]
		gen := l.fleet.gen(n)
		worker, err := l.attempt(n, body)
		_, _, removedAtEnd := l.fleet.snapshot()
		for w := range removedAtEnd {
			removedAtStart[w] = true
		}
		switch {
		case err == nil:
			l.requests.Add(1)
			return worker, n, removedAtStart, true
		case errors.Is(err, errRefused):
			l.refused.Add(1)
		case errors.Is(err, errSilent):
			l.silentCuts.Add(1)
			l.note(fmt.Sprintf("%s: %v", n, err))
		default:
			l.failed.Add(1)
			if l.fleet.onKilled(n, gen) {
				l.failedOnKilled.Add(1)
				l.errMu.Lock()
				if len(l.killedErrs) < 8 {
					l.killedErrs = append(l.killedErrs, err.Error())
				}
				l.errMu.Unlock()
			} else {
				l.note(fmt.Sprintf("%s: %v", n, err))
			}
		}
		time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond) // the client's retry backoff
	}
}

var (
	errRefused = errors.New("connection refused: nothing sent")
	errSilent  = errors.New("a stream ended without [DONE] and without an error")
)

func (l *load) attempt(n string, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, replicaURL(n)+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || (errors.As(err, &op) && op.Op == "dial") {
			return "", errRefused
		}
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	in := l.fleet.inflight[n]
	atomic.AddInt64(in, 1)
	defer atomic.AddInt64(in, -1)
	worker := resp.Header.Get("x-worker-id")
	l.fleet.streaming(worker, 1)
	defer l.fleet.streaming(worker, -1)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		switch {
		case bytes.Equal(line, []byte("data: [DONE]")):
			done = true
		case bytes.HasPrefix(line, []byte("event: error")), bytes.HasPrefix(line, []byte(`data: {"error"`)):
			return "", fmt.Errorf("SSE error event: %s", line)
		}
	}
	switch {
	case sc.Err() != nil:
		return "", sc.Err()
	case !done:
		return "", errSilent
	case worker == "":
		return "", fmt.Errorf("an answer without x-worker-id")
	}
	return worker, nil
}

func (l *load) note(s string) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if len(l.errs) < 8 {
		l.errs = append(l.errs, s)
	}
}

func (l *load) end() loadStats {
	close(l.stop)
	l.wg.Wait()
	return loadStats{requests: l.requests.Load(), failed: l.failed.Load(), failedOnKilled: l.failedOnKilled.Load(),
		silentCuts: l.silentCuts.Load(), refused: l.refused.Load(), followUps: l.followUps.Load(), stayed: l.stayed.Load(),
		excluded: l.excluded.Load(), crossReplica: l.crossReplica.Load(), movedCross: l.movedCross.Load(), errs: l.errs,
		killedErrs: l.killedErrs}
}
