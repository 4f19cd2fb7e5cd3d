//go:build kvoracle

package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/store"
)

// This file is built only with the kvoracle tag (scripts/kvbench.py builds such a router for the
// benchmark; the product's binary has none of it). With it, --kv-events matches every candidate
// on what its engine holds at decision time, asked synchronously of workersim's loopback
// measurement endpoint (POST /debug/kv/match), instead of on the events heard so far: the bound
// that routing on events is measured against. Reservations, the threshold, the overload check
// and the tie-break are the product's.

func init() { kvOracle = newOracleSource }

// oraclePath is workersim's measurement endpoint (cmd/workersim/kvoracle.go).
const oraclePath = "/debug/kv/match"

// oracleSource answers Matched from the workers themselves and everything else from the hub.
type oracleSource struct {
	*kvevents.Hub
	urls   atomic.Pointer[map[uint32]string]
	client *http.Client
	log    func(msg string, args ...any)
}

var _ core.KVSource = (*oracleSource)(nil)

func newOracleSource(h *kvHub) core.KVSource {
	o := &oracleSource{Hub: h.hub, log: h.log.Warn}
	o.urls.Store(&map[uint32]string{})
	o.client = &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: h.dialer.DialContext, MaxIdleConnsPerHost: 16}}
	h.onSync = o.sync
	return o
}

// sync keeps the workers' URLs, loopback ones only: the oracle asks nothing of any other host.
func (o *oracleSource) sync(workers []store.Worker) {
	urls := map[uint32]string{}
	for _, w := range workers {
		if err := loopbackURL(w.URL); err != nil {
			o.log("the KV oracle does not ask this worker: it routes on the text index", "worker", w.URL, "err", err)
			continue
		}
		urls[uint32(w.ID)] = w.URL
	}
	o.urls.Store(&urls)
}

func loopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(u.Host)
	if err != nil {
		host = u.Host
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", host)
	}
	return nil
}

// Matched asks worker w's engine how many leading blocks of keys it holds now; a worker that
// cannot be asked is not trusted (the text index).
func (o *oracleSource) Matched(w uint32, keys []kvevents.Key) (int, kvevents.Trust) {
	base, ok := (*o.urls.Load())[w]
	if !ok {
		return 0, kvevents.Disconnected
	}
	n, err := o.ask(base, keys)
	if err != nil {
		o.log("the KV oracle could not ask a worker", "worker", base, "err", err)
		return 0, kvevents.Disconnected
	}
	return n, kvevents.Trusted
}

func (o *oracleSource) ask(base string, keys []kvevents.Key) (int, error) {
	body, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	resp, err := o.client.Post(base+oraclePath, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, answer)
	}
	var r struct{ Matched int }
	return r.Matched, json.Unmarshal(answer, &r)
}
