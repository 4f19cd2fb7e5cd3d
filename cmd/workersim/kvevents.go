package main

import (
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/sim"
)

// kvEventPublisher sends the engine's cache changes as vLLM's KV events, so a router can route
// on what the engine holds instead of guessing. Called from the driver's goroutine only.
type kvEventPublisher struct {
	pub       *kvevents.Publisher
	blockSize int
	events    []kvevents.Event
	muted     func() bool   // the mute_kv_events fault is on
	garbled   func() bool   // the garble_kv_events fault is on
	oracle    *kvevents.Set // what the engine holds now, for the measurement endpoint (kvoracle.go)
}

func newKVEventPublisher(cfg serverConfig) (*kvEventPublisher, error) {
	if cfg.kvEvents == "" {
		return nil, nil
	}
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: cfg.kvEvents, Connect: cfg.kvEventsConnect,
		ReplayEndpoint: cfg.kvEventsReplay, Encoding: kvevents.Keyed, Topic: cfg.kvEventsTopic})
	if err != nil {
		return nil, err
	}
	return &kvEventPublisher{pub: pub, blockSize: cfg.engine.BlockTokens, oracle: newOracleSet(cfg.engine.BlockTokens)}, nil
}

func (p *kvEventPublisher) changed(now time.Time, changes []sim.CacheEvent) {
	p.events = p.events[:0]
	for _, c := range changes {
		p.events = append(p.events, p.event(c))
	}
	p.send(now)
}

func (p *kvEventPublisher) event(c sim.CacheEvent) kvevents.Event {
	e := kvevents.Event{Kind: kvevents.Stored, Tier: true, Tokens: c.Tokens, BlockSize: p.blockSize,
		Parent: kvevents.EngineHash(c.Parent), HasParent: c.HasParent, Identity: c.Adapter, Salt: c.Salt}
	if c.Removed {
		e = kvevents.Event{Kind: kvevents.Removed, Tier: true}
	}
	for _, h := range c.Hashes {
		e.Hashes = append(e.Hashes, kvevents.EngineHash(h))
	}
	return e
}

// cleared says the engine dropped its whole cache (/reset_prefix_cache).
func (p *kvEventPublisher) cleared(now time.Time) {
	p.events = append(p.events[:0], kvevents.Event{Kind: kvevents.Cleared, Tier: true})
	p.send(now)
}

func (p *kvEventPublisher) send(now time.Time) {
	p.applyOracle(p.events)
	b := kvevents.Batch{TS: float64(now.UnixNano()) / 1e9, Events: p.events}
	var err error
	if p.garbled != nil && p.garbled() {
		err = p.pub.PublishRaw(garble(b))
	} else if p.muted != nil && p.muted() {
		err = p.pub.Withhold(b)
	} else {
		err = p.pub.Publish(b)
	}
	if err != nil {
		slog.Warn("publishing KV events", "err", err)
	}
}

func (p *kvEventPublisher) close() {
	if p != nil {
		_ = p.pub.Close()
	}
}

// garble is noise of about b's size that decodes as no batch.
func garble(b kvevents.Batch) []byte {
	n := 16 + 8*len(b.Events)
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(0xc1) // msgpack's "never used" code
	}
	return out
}
