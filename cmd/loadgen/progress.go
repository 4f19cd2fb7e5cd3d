package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// progressInterval is how often the progress line is printed: at most once a second.
const progressInterval = time.Second

// progressLine renders the progress of a run elapsed into it.
func progressLine(p progress, elapsed time.Duration) string {
	inflight := p.sent - p.finished - p.cancelled
	return fmt.Sprintf("[%5.0fs] sent %d  done %d  errors %d  in flight %d  %.1f req/s\n",
		elapsed.Seconds(), p.sent, p.finished, p.errors, inflight, ratio(float64(p.finished), elapsed.Seconds()))
}

// startProgress prints a progress line to out on every tick until the returned stop is called;
// stop waits for the printing goroutine to end. A nil out prints nothing.
func startProgress(out io.Writer, ticks <-chan time.Time, c *collector, clock Clock, start time.Time) (stop func()) {
	if out == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
				_, _ = io.WriteString(out, progressLine(c.snapshot(), clock.Now().Sub(start)))
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
