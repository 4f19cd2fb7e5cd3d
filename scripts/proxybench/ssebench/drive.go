package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

const requestBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"Stream a long answer."}]}`

// sample is what one stream measured.
type sample struct {
	events    int
	latencies []time.Duration // per event, from the upstream's write to the read here
	gaps      []time.Duration // per event after the first, since the previous one
	err       error
}

// drive runs streams concurrent streams for duration and prints the result.
func drive(url string, streams int, duration time.Duration) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}}
	end := time.Now().Add(duration)
	start := time.Now()
	results := make([][]sample, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				results[i] = append(results[i], stream(client, url))
			}
		}()
	}
	wg.Wait()
	return report(slices.Concat(results...), time.Since(start))
}

// stream reads one stream to its end.
func stream(client *http.Client, url string) sample {
	var s sample
	resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(requestBody)))
	if err != nil {
		return sample{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return sample{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	sc := bufio.NewScanner(resp.Body)
	var last time.Time
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		now := time.Now()
		if bytes.Equal(line, []byte("data: [DONE]")) {
			done = true
			continue
		}
		sent, ok := stamp(line)
		if !ok {
			continue
		}
		s.events++
		s.latencies = append(s.latencies, now.Sub(time.Unix(0, sent)))
		if !last.IsZero() {
			s.gaps = append(s.gaps, now.Sub(last))
		}
		last = now
	}
	if s.err = sc.Err(); s.err == nil && !done {
		s.err = fmt.Errorf("the stream ended without [DONE]")
	}
	return s
}

// stamp reads the write time out of an event line.
func stamp(line []byte) (int64, bool) {
	_, rest, ok := bytes.Cut(line, []byte(`"t":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	t, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return t, err == nil
}

// report prints the samples as one JSON line.
func report(samples []sample, elapsed time.Duration) error {
	var lat, gaps []time.Duration
	events, streams, failed := 0, 0, 0
	for _, s := range samples {
		if s.err != nil {
			failed++
			fmt.Fprintln(os.Stderr, "stream failed:", s.err)
			continue
		}
		streams++
		events += s.events
		lat, gaps = append(lat, s.latencies...), append(gaps, s.gaps...)
	}
	out := map[string]any{"streams": streams, "failed": failed, "events": events,
		"events_per_sec": float64(events) / elapsed.Seconds(),
		"latency_p50_us": pct(lat, 0.50), "latency_p99_us": pct(lat, 0.99),
		"gap_p50_us": pct(gaps, 0.50), "gap_p99_us": pct(gaps, 0.99)}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// pct is the q-quantile of ds, in microseconds.
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[int(q*float64(len(ds)-1))].Nanoseconds()) / 1e3
}
