package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func newTestSplice(kind resumeKind, limit int, total int64) *splice {
	return &splice{kind: kind, limit: limit, budget: &spliceBudget{limit: total}}
}

const (
	chunkA = `data: {"id":"cmpl-a","created":100,"choices":[{"index":0,"text":" one","finish_reason":null}]}` + "\n\n"
	chunkB = `data: {"id":"cmpl-b","created":200,"choices":[{"index":0,"text":" two","finish_reason":"length"}]}` + "\n\n"
	usageB = `data: {"id":"cmpl-b","created":200,"choices":[],"usage":{"prompt_tokens":13,"completion_tokens":1,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n"
)

// TestSplicePassesWholeEventsAndKeepsTheirText: an event cut anywhere
// reaches the client only whole, and its text is kept to resume with.
func TestSplicePassesWholeEventsAndKeepsTheirText(t *testing.T) {
	s := newTestSplice(resumeCompletion, 1<<10, 1<<20)
	for i := 0; i < len(chunkA); i += 7 {
		s.feed([]byte(chunkA[i:min(i+7, len(chunkA))]))
		if whole := len(s.out) == len(chunkA); (i+7 >= len(chunkA)) != whole {
			t.Fatalf("after %d bytes the client has %q", i+7, s.out)
		}
	}
	if string(s.text) != " one" || s.tokens != 1 || s.budget.used.Load() != 4 {
		t.Fatalf("kept %q, %d tokens, budget %d", s.text, s.tokens, s.budget.used.Load())
	}
	s.release()
	if s.budget.used.Load() != 0 {
		t.Fatal("the budget was not given back")
	}
}

// TestSpliceRewritesTheResumedWorkersEvents: after a resume the events
// carry the first worker's id and created, and the usage of the whole
// generation.
func TestSpliceRewritesTheResumedWorkersEvents(t *testing.T) {
	s := newTestSplice(resumeCompletion, 1<<10, 1<<20)
	s.feed([]byte(chunkA))
	s.out = s.out[:0]
	s.resumed()
	s.feed([]byte(chunkB + usageB + "data: [DONE]\n\n"))
	events := strings.Split(strings.TrimSpace(string(s.out)), "\n\n")
	if len(events) != 3 || events[2] != "data: [DONE]" {
		t.Fatalf("events %q", events)
	}
	for _, ev := range events[:2] {
		v := fastjson.MustParse(strings.TrimPrefix(ev, "data: "))
		if string(v.GetStringBytes("id")) != "cmpl-a" || v.GetInt("created") != 100 {
			t.Fatalf("a resumed event kept its own head: %s", ev)
		}
	}
	u := fastjson.MustParse(strings.TrimPrefix(events[1], "data: ")).Get("usage")
	if u.GetInt("prompt_tokens") != 12 || u.GetInt("completion_tokens") != 2 || u.GetInt("total_tokens") != 14 ||
		u.GetInt("prompt_tokens_details", "cached_tokens") != 8 {
		t.Fatalf("usage %s", u)
	}
}

// TestSpliceDropsTheRoleOfAResumedChat: the client saw the assistant's
// role once.
func TestSpliceDropsTheRoleOfAResumedChat(t *testing.T) {
	s := newTestSplice(resumeChat, 1<<10, 1<<20)
	s.feed([]byte(`data: {"id":"c1","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"}}]}` + "\n\n"))
	s.resumed()
	s.out = s.out[:0]
	s.feed([]byte(`data: {"id":"c2","created":2,"choices":[{"index":0,"delta":{"role":"assistant","content":" there"}}]}` + "\n\n"))
	if strings.Contains(string(s.out), "role") || string(s.text) != "hi there" {
		t.Fatalf("resumed chat chunk %s, text %q", s.out, s.text)
	}
}

// TestSpliceRefusesWhatCannotResume: a tool call, a second choice, text
// past the stream's bound or the replica's, and an engine's error event
// each end the stream's chance to resume, and give its budget back.
func TestSpliceRefusesWhatCannotResume(t *testing.T) {
	cases := []struct {
		name   string
		kind   resumeKind
		limit  int
		total  int64
		events string
	}{
		{"a tool call", resumeChat, 1 << 10, 1 << 20,
			`data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n" +
				`data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}` + "\n\n"},
		{"two choices", resumeCompletion, 1 << 10, 1 << 20,
			`data: {"id":"c","choices":[{"index":0,"text":"a"},{"index":1,"text":"b"}]}` + "\n\n"},
		{"over the stream's buffer", resumeCompletion, 5, 1 << 20, chunkA + chunkA},
		{"over the replica's buffer", resumeCompletion, 1 << 10, 6, chunkA + chunkA},
	}
	for _, c := range cases {
		s := newTestSplice(c.kind, c.limit, c.total)
		s.feed([]byte(c.events))
		if !errors.Is(s.refused, errCannotResume) || s.canResume(5) || s.budget.used.Load() != 0 {
			t.Errorf("%s: refused %v, budget %d", c.name, s.refused, s.budget.used.Load())
		}
		if string(s.out) != c.events {
			t.Errorf("%s: the client got %q; want every byte passed on", c.name, s.out)
		}
	}
	s := newTestSplice(resumeCompletion, 1<<10, 1<<20)
	s.feed([]byte(chunkA + `data: {"error":{"message":"boom"}}` + "\n\ndata: [DONE]\n\n"))
	if !s.engineFailed || string(s.out) != chunkA {
		t.Fatalf("an engine error event: failed %v, client got %q", s.engineFailed, s.out)
	}
}

// TestResumableShapes: which requests may resume.
func TestResumableShapes(t *testing.T) {
	for body, want := range map[string]bool{
		`{"prompt":"a","stream":true,"max_tokens":5}`:                                 true,
		`{"prompt":"a","n":1,"logprobs":null,"stop":[],"echo":false}`:                 true,
		`{"prompt":"a","response_format":{"type":"text"}}`:                            true,
		`{"prompt":"a","n":2}`:                                                        false,
		`{"prompt":"a","logprobs":0}`:                                                 true,
		`{"prompt":"a","logprobs":2}`:                                                 false,
		`{"prompt":"a","stop":"\n"}`:                                                  false,
		`{"prompt":"a","stop":["x"]}`:                                                 false,
		`{"prompt":["a","b"]}`:                                                        false,
		`{"prompt":"a","echo":true}`:                                                  false,
		`{"prompt":"a","response_format":{"type":"json_object"}}`:                     false,
		`{"prompt":"a","guided_json":{"type":"object"}}`:                              false,
		`{"messages":[{"role":"user","content":"hi"}],"top_logprobs":3}`:              false,
		`{"messages":[{"role":"user","content":"hi"}],"logprobs":true}`:               false,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[{"a":1}]}`:             true,
		`{"messages":[{"role":"user","content":"hi"}],"continue_final_message":true}`: false,
	} {
		kind := resumeCompletion
		if strings.Contains(body, "messages") {
			kind = resumeChat
		}
		if got := resumableShape(fastjson.MustParse(body), kind) == nil; got != want {
			t.Errorf("%s: resumable %v, want %v", body, got, want)
		}
	}
}

// TestContinuationBodies: the request that continues a generation.
func TestContinuationBodies(t *testing.T) {
	got, err := continuation(resumeCompletion, []byte(`{"prompt":"tell","max_tokens":10,"stream":true}`), []byte(" me more"), 2)
	if err != nil || string(got) != `{"prompt":"tell me more","max_tokens":8,"stream":true}` {
		t.Fatalf("completion continuation %s %v", got, err)
	}
	got, err = continuation(resumeChat, []byte(`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4}`), []byte("Hel"), 1)
	want := `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],"max_completion_tokens":3,` +
		`"continue_final_message":true,"add_generation_prompt":false}`
	if err != nil || string(got) != want {
		t.Fatalf("chat continuation %s %v", got, err)
	}
	if _, err := continuation(resumeCompletion, []byte(`{"prompt":"a","max_tokens":2}`), []byte("xy"), 2); !errors.Is(err, errCannotResume) {
		t.Fatalf("a generation at its limit resumed: %v", err)
	}
}
