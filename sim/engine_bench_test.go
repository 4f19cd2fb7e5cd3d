package sim

import (
	"testing"
	"time"
)

// benchSessions feeds an engine n requests from 64 agentic sessions whose prompts grow by 2 KiB
// a turn from 8 KiB to 88 KiB (12k tokens on average, mostly cached), one every interval, and
// runs it to the end. It returns the virtual time the work took.
func benchSessions(b *testing.B, e *Engine, texts [][]byte, n int, interval time.Duration) time.Duration {
	now := time.Duration(0)
	for i := range n {
		session, turn := i%len(texts), i/len(texts)
		size := 8<<10 + (turn%41)*(2<<10)
		now += interval
		e.Advance(now)
		r := Request{ID: RequestID(i), Prompt: texts[session][:size], MaxTokens: 200}
		if err := e.Submit(r, now); err != nil {
			b.Fatal(err)
		}
	}
	for {
		at, ok := e.NextEventAt()
		if !ok {
			return now
		}
		now = at
		e.Advance(at)
	}
}

func sessionTexts(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = text(i, size)
	}
	return out
}

// BenchmarkEngineAgenticSessions measures the cost of simulating one request of about 12k
// tokens (ns/op is per request).
func BenchmarkEngineAgenticSessions(b *testing.B) {
	texts := sessionTexts(64, 88<<10)
	e := NewEngine(Config{KVCapacityTokens: 1 << 20})
	b.ReportAllocs()
	b.ResetTimer()
	benchSessions(b, e, texts, b.N, 100*time.Millisecond)
	b.ReportMetric(float64(e.PrefixHits())/float64(e.PrefixQueries()), "hit-rate")
}

// BenchmarkEngineColdPrompts measures requests that share nothing (every block is hashed,
// inserted and later evicted).
func BenchmarkEngineColdPrompts(b *testing.B) {
	texts := sessionTexts(1024, 88<<10)
	e := NewEngine(Config{})
	b.ReportAllocs()
	b.ResetTimer()
	now := time.Duration(0)
	for i := range b.N {
		now += 200 * time.Millisecond
		e.Advance(now)
		r := Request{ID: RequestID(i), Prompt: texts[i%len(texts)][:48<<10], MaxTokens: 16}
		if err := e.Submit(r, now); err != nil {
			b.Fatal(err)
		}
	}
	run(e, time.Duration(1<<62))
}
