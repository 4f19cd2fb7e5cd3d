package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/kvevents"
)

// pathKVOracle is a measurement endpoint, not vLLM's: POST a JSON array of the router's block
// keys (kvevents.Hub.Keys of a prompt's tokens) and the answer, {"matched": n}, is how many
// leading blocks of them the engine holds at this instant. A benchmark's oracle router asks it
// synchronously to know every worker's cache exactly at decision time, the bound the routers on
// events and on the text index are measured against. Served only with --kv-events-endpoint, and
// only to loopback peers.
const pathKVOracle = "/debug/kv/match"

// errNotLoopback refuses the oracle endpoint to a peer outside 127.0.0.0/8 and ::1 (403).
var errNotLoopback = errors.New("the KV oracle endpoint answers loopback peers only")

// oracleSet is the engine's blocks by the router's keys, changed by the same events the engine
// publishes and at the same instant, whether or not they reach the socket (mute_kv_events):
// what the engine holds, with no lag and no loss. Owned by the driver's goroutine.
func newOracleSet(blockSize int) *kvevents.Set {
	return kvevents.NewSet(blockSize, 1<<30)
}

// applyOracle keeps the oracle's set in step with a batch of the engine's events; a stored block
// whose parent the set never saw cannot happen (the set sees every event from the start).
func (p *kvEventPublisher) applyOracle(events []kvevents.Event) {
	for _, e := range events {
		_ = p.oracle.Apply(e)
	}
}

// matched is how many leading blocks of keys the engine holds now: the engine is caught up to
// this instant first, so a block its latest step stored is counted.
func (d *driver) matched(keys []kvevents.Key) (int, error) {
	n := 0
	err := d.call(func() {
		d.catchUp()
		n = d.kv.oracle.Matched(keys)
	})
	return n, err
}

func (a *engineAdmin) handleKVOracle(ctx *fasthttp.RequestCtx) {
	if ip, ok := ctx.RemoteAddr().(*net.TCPAddr); !ok || !ip.IP.IsLoopback() {
		ctx.SetStatusCode(fasthttp.StatusForbidden)
		ctx.SetContentType("application/json")
		ctx.SetBody(appendErrorBody(nil, errNotLoopback.Error(), "invalid_request_error", "forbidden"))
		return
	}
	keys, err := a.oracleKeys(ctx.PostBody())
	if err != nil {
		a.reply.writeError(ctx, err)
		return
	}
	n, err := a.driver.matched(keys)
	if err != nil {
		a.reply.writeError(ctx, err)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(strconv.AppendInt(append([]byte(nil), `{"matched":`...), int64(n), 10))
	ctx.Response.AppendBodyString("}")
}

func (a *engineAdmin) oracleKeys(body []byte) ([]kvevents.Key, error) {
	parser := a.parsers.Get()
	defer a.parsers.Put(parser)
	v, err := parser.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	items, err := v.Array()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	keys := make([]kvevents.Key, len(items))
	for i, item := range items {
		k, err := item.Uint()
		if err != nil || k > 1<<32-1 {
			return nil, fmt.Errorf("%w: key %s is not a 32-bit key", errBadRequest, item)
		}
		keys[i] = kvevents.Key(k)
	}
	return keys, nil
}
