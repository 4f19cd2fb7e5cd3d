package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is how a publisher lays out a batch: vLLM's structs were
// positional arrays before they became keyed maps.
type Encoding int

const (
	// Keyed: {"ts", "events", "data_parallel_rank"}, each event a map with
	// its "type"; what current vLLM sends.
	Keyed Encoding = iota
	// Positional: [ts, events], each event [tag, fields...]; what earlier
	// vLLM sent.
	Positional
)

// Encode lays a batch out as a vLLM publisher does.
func Encode(b Batch, enc Encoding) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := writer{e, &errs{}}
	if enc == Positional {
		w.array(2)
		w.float(b.TS)
		w.array(len(b.Events))
		for _, ev := range b.Events {
			w.positional(ev)
		}
	} else {
		w.mapLen(3)
		w.str("ts")
		w.float(b.TS)
		w.str("events")
		w.array(len(b.Events))
		for _, ev := range b.Events {
			w.keyed(ev)
		}
		w.str("data_parallel_rank")
		w.int(0)
	}
	return buf.Bytes(), w.err
}

type errs struct{ err error }

// writer keeps the first error of a run of writes, so Encode reads as the
// layout it writes.
type writer struct {
	e *msgpack.Encoder
	*errs
}

func (w writer) do(err error) {
	if w.err == nil {
		w.err = err
	}
}
func (w writer) array(n int)     { w.do(w.e.EncodeArrayLen(n)) }
func (w writer) mapLen(n int)    { w.do(w.e.EncodeMapLen(n)) }
func (w writer) str(s string)    { w.do(w.e.EncodeString(s)) }
func (w writer) float(f float64) { w.do(w.e.EncodeFloat64(f)) }
func (w writer) int(n int64)     { w.do(w.e.EncodeInt(n)) }
func (w writer) null()           { w.do(w.e.EncodeNil()) }

func (w writer) hashes(hs []EngineHash) {
	w.array(len(hs))
	for _, h := range hs {
		w.do(w.e.EncodeUint(uint64(h)))
	}
}

func (w writer) parent(ev Event) {
	if ev.HasParent {
		w.do(w.e.EncodeUint(uint64(ev.Parent)))
		return
	}
	w.null()
}

func (w writer) tokens(ts []uint32) {
	w.array(len(ts))
	for _, t := range ts {
		w.int(int64(t))
	}
}

func (w writer) medium(ev Event) {
	if ev.Tier {
		w.str(gpuMedium)
		return
	}
	w.str("CPU")
}

// keyed reports whether a Stored event carries an adapter or a salt, which
// vLLM sends as lora_name and extra_keys.
func (ev Event) keyed() bool { return ev.Identity != "" || ev.Salt != "" }

// optionalStr writes s, or nil for "".
func (w writer) optionalStr(s string) {
	if s == "" {
		w.null()
		return
	}
	w.str(s)
}

// extraKeys writes vLLM's extra_keys, one entry per block: the adapter's
// name on every block, the salt after it on the first block of a chain
// that starts the prompt; nil for a block with neither.
func (w writer) extraKeys(ev Event) {
	w.array(len(ev.Hashes))
	for i := range ev.Hashes {
		var keys []string
		if ev.Identity != "" {
			keys = append(keys, ev.Identity)
		}
		if i == 0 && !ev.HasParent && ev.Salt != "" {
			keys = append(keys, ev.Salt)
		}
		if len(keys) == 0 {
			w.null()
			continue
		}
		w.array(len(keys))
		for _, k := range keys {
			w.str(k)
		}
	}
}

func (w writer) positional(ev Event) {
	switch ev.Kind {
	case Stored:
		n := 7
		if ev.keyed() {
			n = 9
		}
		w.array(n)
		w.str(ev.Kind.String())
		w.hashes(ev.Hashes)
		w.parent(ev)
		w.tokens(ev.Tokens)
		w.int(int64(ev.BlockSize))
		w.null() // lora_id
		w.medium(ev)
		if ev.keyed() {
			w.optionalStr(ev.Identity) // lora_name
			w.extraKeys(ev)
		}
	case Removed:
		w.array(3)
		w.str(ev.Kind.String())
		w.hashes(ev.Hashes)
		w.medium(ev)
	default:
		w.array(1)
		w.str(ev.Kind.String())
	}
}

func (w writer) keyed(ev Event) {
	switch ev.Kind {
	case Stored:
		n := 7
		if ev.keyed() {
			n = 9
		}
		w.mapLen(n)
		w.str("type")
		w.str(ev.Kind.String())
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("parent_block_hash")
		w.parent(ev)
		w.str("token_ids")
		w.tokens(ev.Tokens)
		w.str("block_size")
		w.int(int64(ev.BlockSize))
		w.str("lora_id")
		w.null()
		w.str("medium")
		w.medium(ev)
		if ev.keyed() {
			w.str("lora_name")
			w.optionalStr(ev.Identity)
			w.str("extra_keys")
			w.extraKeys(ev)
		}
	case Removed:
		w.mapLen(3)
		w.str("type")
		w.str(ev.Kind.String())
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("medium")
		w.medium(ev)
	default:
		w.mapLen(1)
		w.str("type")
		w.str(ev.Kind.String())
	}
}
