package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestAResumedStreamContinuesItsOwnRequest: a stream's body is read into a
// pooled buffer, which the door would give back once the stream started;
// other requests of the same size are served meanwhile, and then the
// stream's worker dies. The continuation must be written from the
// stream's own request, not from whatever took its buffer since.
func TestAResumedStreamContinuesItsOwnRequest(t *testing.T) {
	w1, w2 := startFake(t, "w1"), startFake(t, "w2")
	for _, w := range []*fakeworker.Worker{w1, w2} {
		w.Set(textEngine(4))
	}
	cfg := Config{Migration: DefaultMigration()}
	r := startRouter(t, cfg, w1, w2)
	stream := openBulk(t, r.url, "default", "cut-a: the story so far", 30)
	got := &sseRead{}
	if err := got.read(stream, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // the same size class as the stream's body
		resp, body := post(t, r.url, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"zz-%03d: another story","max_tokens":30}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("a request meanwhile: %d %s", resp.StatusCode, body)
		}
	}
	w1.Open()
	w2.Open()
	if err := got.read(stream, -1); err != nil {
		t.Fatal(err)
	}
	if got.text != tokensText(30, 'c') || !got.done || got.errors != 0 {
		t.Fatalf("the resumed stream read %q (done %v, %d errors); want <0:c>..<29:c>, whole", got.text, got.done, got.errors)
	}
	continued := `"prompt":"cut-a: the story so far<0:c><1:c><2:c><3:c>"`
	if b1, b2 := w1.LastBody(), w2.LastBody(); !strings.Contains(b1, continued) && !strings.Contains(b2, continued) {
		t.Fatalf("no worker was sent the continuation; last bodies %s and %s", b1, b2)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "every load released")
}

// textEngine is a fake engine whose completion of a prompt is the tokens
// <0:c> <1:c> ... up to max_tokens, c the prompt's first byte; a prompt
// that carries k of them already gets <k:c> onwards. A new stream of a
// prompt starting "cut" sends held tokens, then waits for the worker's
// gate, and when it opens its connection is closed: a worker dying
// mid-stream.
func textEngine(held int) fakeworker.Behaviour {
	return func(e *fakeworker.Exchange) {
		req, ok := readCompletion(e)
		if !ok {
			return
		}
		from := strings.Count(req.Prompt, "<")
		if e.StartStream() != nil {
			return
		}
		for i := from; i < from+req.MaxTokens; i++ {
			if i == held && from == 0 && strings.HasPrefix(req.Prompt, "cut") {
				if e.WaitHangUp() {
					return
				}
				e.Cut() // the engine dies mid-stream
				return
			}
			if e.Event(textEvent(req, from, i)) != nil {
				return
			}
		}
		_ = e.EndStream()
	}
}

// completionAsked is what a fake engine reads of a completion request.
type completionAsked struct {
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
}

// readCompletion reads e's completion request, and answers a 400 to one
// without a prompt.
func readCompletion(e *fakeworker.Exchange) (completionAsked, bool) {
	var req completionAsked
	if err := json.Unmarshal(e.Body, &req); err != nil || req.Prompt == "" {
		e.JSON(400, `{"error":{"message":"bad body"}}`)
		return req, false
	}
	return req, true
}

// textEvent is the event of token i of textEngine's text for req, whose
// prompt carries from of them already: <i:c>, c the prompt's first byte,
// the last one finished by its length.
func textEvent(req completionAsked, from, i int) string {
	finish := "null"
	if i == from+req.MaxTokens-1 {
		finish = `"length"`
	}
	return fmt.Sprintf(`{"id":"cmpl-%d","object":"text_completion","created":%d,"choices":[{"index":0,"text":"<%d:%c>","finish_reason":%s}]}`,
		from, 1000+from, i, req.Prompt[0], finish)
}

// sseRead is a stream as its client read it.
type sseRead struct {
	text   string
	ids    map[string]bool
	done   bool
	errors int
}

// openBulk starts a streamed completion of prompt in class, and returns
// its events to read.
func openBulk(t *testing.T, url, class, prompt string, maxTokens int) *bufio.Reader {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":%d,"stream":true}`, prompt, maxTokens)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("x-priority", class)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s answered %d", prompt, resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}

// read reads n data events (n < 0: to the end) into s.
func (s *sseRead) read(r *bufio.Reader, n int) error {
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	for n != 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		n--
		if data == "[DONE]" {
			s.done = true
			continue
		}
		var c struct {
			ID      string
			Choices []struct{ Text string }
			Error   any
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("event %q: %w", data, err)
		}
		if c.Error != nil {
			s.errors++
		}
		s.ids[c.ID] = true
		for _, ch := range c.Choices {
			s.text += ch.Text
		}
	}
	return nil
}

// tokensText is textEngine's first n tokens for a prompt starting with c.
func tokensText(n int, c byte) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "<%d:%c>", i, c)
	}
	return b.String()
}
