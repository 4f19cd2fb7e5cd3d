package main

import (
	"bufio"
	"errors"
	"net"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

// stream answers with server-sent events, rendered by the job's streamRenderer and flushed as
// the engine produces tokens. Nothing is sent before the first token exists: like a real engine,
// the status line and headers wait for the prefill, so a wedged worker sends no byte at all.
func (jr *jobRunner) stream(ctx *fasthttp.RequestCtx, t *ticket, j job) {
	conn := ctx.Conn()
	w := watchConn(conn)
	events, err := jr.await(t, w.Gone(), nil, sim.FirstToken)
	stray := w.Stop()
	if err != nil {
		jr.abandon(ctx, err, t)
		return
	}
	if stray {
		ctx.SetConnectionClose()
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		r := relay{jobs: jr, t: t, job: j, events: j.render.(streamRenderer), out: bw, conn: conn}
		r.run(conn, events)
	})
}

// relay writes one request's events to its SSE stream. It runs on the goroutine fasthttp gives
// the body writer, which ends when run returns.
type relay struct {
	jobs   *jobRunner
	t      *ticket
	job    job
	events streamRenderer
	out    *bufio.Writer
	buf    []byte
	conn   net.Conn
	chunks int64 // token chunks sent
}

// errStreamFault: the cut_streams or error_streams fault ended the stream.
var errStreamFault = errors.New("stream ended by a fault")

// faulted ends the stream as the current fault says, before its next token chunk: cut (the
// connection closed under it) or an engine error event and [DONE].
func (r *relay) faulted() error {
	f := r.jobs.faults.load()
	if f.Mode != faultCutStreams && f.Mode != faultErrorStreams || r.chunks < f.After {
		return nil
	}
	r.jobs.driver.Cancel(r.t)
	if f.Mode == faultCutStreams {
		_ = r.conn.Close()
		return errStreamFault
	}
	r.buf = append(appendErrorBody(append(r.buf[:0], "data: "...), "simulated engine failure mid-stream",
		"internal_server_error", "injected_fault"), "\n\n"+doneEvent...)
	_, _ = r.out.Write(r.buf)
	_ = r.out.Flush()
	return errStreamFault
}

func (r *relay) run(conn net.Conn, events []sim.Event) {
	w := watchConn(conn)
	defer w.Stop()
	for {
		for _, ev := range events {
			finished, err := r.write(ev)
			if errors.Is(err, errStreamFault) {
				return
			}
			if err != nil {
				r.jobs.clientGone(r.t)
				return
			}
			if finished {
				return
			}
		}
		var err error
		if events, err = r.next(w.Gone(), events[:0]); err != nil {
			return
		}
	}
}

// next waits for more events; on a client that went away it cancels the request.
func (r *relay) next(gone <-chan struct{}, events []sim.Event) ([]sim.Event, error) {
	events, err := r.jobs.await(r.t, gone, events, sim.Token)
	switch {
	case err == nil:
	case errors.Is(err, errClientGone):
		r.jobs.clientGone(r.t)
	default:
		r.jobs.driver.Cancel(r.t)
	}
	return events, err
}

// write sends the events of one engine event and flushes them; it reports whether the stream is
// complete.
func (r *relay) write(ev sim.Event) (finished bool, err error) {
	switch ev.Kind {
	case sim.FirstToken, sim.Token:
		if err := r.faulted(); err != nil {
			return false, err
		}
		r.chunks++
		r.buf = r.events.appendToken(r.buf[:0], ev.Usage)
	case sim.Done:
		r.jobs.finish(r.job, []sim.Usage{ev.Usage})
		r.buf = r.events.appendEnd(r.buf[:0], ev.Usage)
		finished = true
	}
	if _, err := r.out.Write(r.buf); err != nil {
		return false, err
	}
	return finished, r.out.Flush()
}
