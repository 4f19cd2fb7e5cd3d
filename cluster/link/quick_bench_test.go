package link

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The placer's question on its two clients, against the same cluster port:
// Quick (on the caller's goroutine) and Client (net/http's transport). Run
// with -cpu 1,2 and, to see what a loaded host makes of the hand-offs,
// beside a busy core.
func BenchmarkQuestionQuick(b *testing.B) {
	q, addr := quickPeerB(b)
	body := []byte("where does this prefix go?")
	b.ReportAllocs()
	for b.Loop() {
		if status, _, err := q.Post(addr, "/q", body, time.Now().Add(time.Second)); err != nil || status != 200 {
			b.Fatal(status, err)
		}
	}
}

func BenchmarkQuestionClient(b *testing.B) {
	q, addr := quickPeerB(b)
	c := NewClient(q.port, time.Second)
	b.Cleanup(c.Close)
	body := []byte("where does this prefix go?")
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		status, _, err := c.Call(ctx, http.MethodPost, addr, "/q", body)
		cancel()
		if err != nil || status != 200 {
			b.Fatal(status, err)
		}
	}
}

func quickPeerB(b *testing.B) (*Quick, string) {
	return questionPeer(b, func(ctx *fasthttp.RequestCtx) { ctx.SetBody(ctx.PostBody()) })
}
