//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loadStats counts what the clients saw. The invariants: failed and
// silentCuts stay zero; every other failure happened before a first byte,
// and the client retried it on another replica (retried).
type loadStats struct {
	requests   int64 // requests the clients made, answered in the end
	retried    int64 // attempts after a failure before the first byte
	cutVisibly int64 // streams that failed after their first byte, visibly (then retried whole)
	silentCuts int64 // streams that ended cleanly without [DONE]: never allowed
	failed     int64 // requests given up after clientPatience
}

// clientPatience is how long a client keeps retrying one request across
// the replicas, longer than any fault a scenario injects lasts.
const clientPatience = 90 * time.Second

// load is clients sending conversation turns to the replicas until stopped.
type load struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	stream  bool
	counts  struct{ requests, retried, cutVisibly, silentCuts, failed atomic.Int64 }
	errMu   sync.Mutex
	lastErr []string
}

var chaosHTTP = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32,
	ResponseHeaderTimeout: 30 * time.Second}}

// startLoad starts n clients, client i preferring replica i%3 and failing
// over to the next one; stream makes every other request a stream.
func startLoad(n int, stream bool) *load {
	l := &load{stop: make(chan struct{}), stream: stream}
	for i := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.client(i)
		}()
	}
	return l
}

func (l *load) client(i int) {
	conv := newConversation(fmt.Sprintf("client %d", i))
	for turn := 0; ; turn++ {
		select {
		case <-l.stop:
			return
		default:
		}
		prompt := conv.next()
		l.send(i, prompt, l.stream && turn%2 == 1)
		time.Sleep(20 * time.Millisecond) // the client's think time between turns
	}
}

// send sends one request until some replica answers it whole, the way a
// client behind a load balancer retries: on a connection error or a 5xx
// before the first byte, on the next replica after a short backoff.
func (l *load) send(i int, prompt string, stream bool) {
	deadline := time.Now().Add(clientPatience)
	for attempt := 0; ; attempt++ {
		base := replicas[replicaNames[(i+attempt)%3]]
		outcome, err := complete(base, prompt, stream)
		switch outcome {
		case answered:
			l.counts.requests.Add(1)
			return
		case cutSilently:
			l.counts.silentCuts.Add(1)
			l.note(err)
		case cutVisibly:
			l.counts.cutVisibly.Add(1)
		}
		if time.Now().After(deadline) {
			l.counts.failed.Add(1)
			l.note(err)
			return
		}
		l.counts.retried.Add(1)
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)) // the client's retry backoff
	}
}

func (l *load) note(err error) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if len(l.lastErr) < 5 && err != nil {
		l.lastErr = append(l.lastErr, err.Error())
	}
}

// end stops the clients and returns what they saw.
func (l *load) end() loadStats {
	close(l.stop)
	l.wg.Wait()
	c := &l.counts
	return loadStats{requests: c.requests.Load(), retried: c.retried.Load(), cutVisibly: c.cutVisibly.Load(),
		silentCuts: c.silentCuts.Load(), failed: c.failed.Load()}
}

type outcome int

const (
	answered    outcome = iota
	beforeFirst         // failed before the first byte: retry
	cutVisibly          // a stream that failed visibly after it started
	cutSilently         // a stream that ended cleanly without [DONE]
)

// complete sends one completion and says how it ended.
func complete(base, prompt string, stream bool) (outcome, error) {
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":8,"stream":%v}`, prompt, stream)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := chaosHTTP.Do(req)
	if err != nil {
		return beforeFirst, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return beforeFirst, fmt.Errorf("%s: %d %s", base, resp.StatusCode, b)
	}
	if !stream {
		var v struct{ Choices []json.RawMessage }
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Choices) == 0 {
			return cutVisibly, fmt.Errorf("%s: a 200 without a whole answer: %v", base, err)
		}
		return answered, nil
	}
	return readStream(resp.Body)
}

// readStream reads an SSE stream to its end: [DONE] then EOF is an answer,
// a read error is a visible cut, an EOF before [DONE] a silent one.
func readStream(r io.Reader) (outcome, error) {
	sc := bufio.NewScanner(r)
	done := false
	for sc.Scan() {
		if bytes.Equal(bytes.TrimSpace(sc.Bytes()), []byte("data: [DONE]")) {
			done = true
		}
	}
	switch {
	case sc.Err() != nil:
		return cutVisibly, sc.Err()
	case !done:
		return cutSilently, fmt.Errorf("a stream ended without [DONE] and without an error")
	}
	return answered, nil
}

// conversation is a growing multi-turn prompt: each turn resends the
// whole conversation, as chat clients do, so its prefix is cached where it
// was served before.
type conversation struct {
	text strings.Builder
	turn int
}

func newConversation(name string) *conversation {
	c := &conversation{}
	c.text.WriteString(strings.Repeat(fmt.Sprintf("System prompt of %s: be helpful and brief. ", name), 24))
	return c
}

func (c *conversation) next() string {
	c.turn++
	fmt.Fprintf(&c.text, " User turn %d asks about the weather; the assistant answers at some length, turn %d.", c.turn, c.turn)
	return c.text.String()
}

// hitRate sends two turns of each of conversations convs (non-streaming,
// through the replicas in turn) and returns the share of prompt tokens the
// workers served from cache in the second round: the first round warms
// prefixes a restarted worker lost.
func hitRate(convs []*conversation) (float64, error) {
	var cached, total int64
	for round := range 2 {
		for i, c := range convs {
			p, ct, err := usage(replicas[replicaNames[i%3]], c.next())
			if err != nil {
				return 0, err
			}
			if round == 1 {
				total += p
				cached += ct
			}
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("no prompt tokens counted")
	}
	return float64(cached) / float64(total), nil
}

func usage(base, prompt string) (prompt_, cached int64, err error) {
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4}`, prompt)
	resp, err := chaosHTTP.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var v struct {
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
			Details      struct {
				Cached int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("%s: %d %s", base, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, 0, err
	}
	return v.Usage.PromptTokens, v.Usage.Details.Cached, nil
}

func probeConversations(name string, n int) []*conversation {
	out := make([]*conversation, n)
	for i := range out {
		out[i] = newConversation(fmt.Sprintf("%s probe %d", name, i))
	}
	return out
}
