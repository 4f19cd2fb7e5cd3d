package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zeebo/xxh3"
)

// Bounds on what one batch may ask of the decoder: a hostile or broken
// publisher gets an error, never an allocation it chose.
const (
	MaxEventsPerBatch = 1 << 16
	MaxBlocksPerEvent = 1 << 16
	MaxTokensPerEvent = 1 << 22
	MaxBlockSize      = 1 << 12
)

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("kvevents: malformed batch")

// gpuMedium is vLLM's name of the tier that serves prefill hits.
const gpuMedium = "GPU"

// Decode reads one batch payload, as vLLM's publisher encodes it: a batch is
// [ts, events, dp_rank] or {"ts","events","data_parallel_rank"}; an event is
// [tag, fields...] or {"type": tag, field: value...}. Unknown event kinds and
// unknown map fields are skipped, so a newer engine's additions do not stop
// the stream.
func Decode(payload []byte) (Batch, error) {
	d := decoder{msgpack.NewDecoder(bytes.NewReader(payload)), len(payload)}
	b, err := d.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return b, nil
}

type decoder struct {
	*msgpack.Decoder
	size int // the payload's length: no collection can hold more elements
}

func (d decoder) batch() (Batch, error) {
	code, err := d.PeekCode()
	if err != nil {
		return Batch{}, err
	}
	if isMap(code) {
		return d.batchMap()
	}
	return d.batchArray()
}

func (d decoder) batchArray() (Batch, error) {
	n, err := d.length(d.DecodeArrayLen, 2, d.size)
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	if b.TS, err = d.DecodeFloat64(); err != nil {
		return Batch{}, fmt.Errorf("ts: %w", err)
	}
	if b.Events, err = d.events(); err != nil {
		return Batch{}, err
	}
	return b, d.skip(n - 2)
}

func (d decoder) batchMap() (Batch, error) {
	n, err := d.length(d.DecodeMapLen, 0, d.size)
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return Batch{}, err
		}
		switch key {
		case "ts":
			b.TS, err = d.DecodeFloat64()
		case "events":
			b.Events, err = d.events()
		default:
			err = d.Skip()
		}
		if err != nil {
			return Batch{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	return b, nil
}

func (d decoder) events() ([]Event, error) {
	n, err := d.length(d.DecodeArrayLen, 0, MaxEventsPerBatch)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	events := make([]Event, 0, n)
	for i := range n {
		e, known, err := d.event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if known {
			events = append(events, e)
		}
	}
	return events, nil
}

func (d decoder) event() (Event, bool, error) {
	code, err := d.PeekCode()
	if err != nil {
		return Event{}, false, err
	}
	if isMap(code) {
		return d.eventMap()
	}
	return d.eventArray()
}

// eventArray reads [tag, fields...] in the order of vLLM's structs:
// BlockStored(block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium, lora_name, extra_keys, group_idx, ...) and
// BlockRemoved(block_hashes, medium, group_idx).
func (d decoder) eventArray() (Event, bool, error) {
	n, err := d.length(d.DecodeArrayLen, 1, d.size)
	if err != nil {
		return Event{}, false, err
	}
	tag, err := d.DecodeString()
	if err != nil {
		return Event{}, false, fmt.Errorf("tag: %w", err)
	}
	var fields []string
	switch tag {
	case "BlockStored":
		fields = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
	case "BlockRemoved":
		fields = []string{"block_hashes", "medium", "group_idx"}
	case "AllBlocksCleared":
	default:
		return Event{}, false, d.skip(n - 1)
	}
	e := newEvent(tag)
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(fields) {
			name = fields[i-1]
		}
		if err := d.field(&e, name); err != nil {
			return Event{}, false, fmt.Errorf("%s %s: %w", tag, name, err)
		}
	}
	e.findSalt()
	return e, true, e.check()
}

func (d decoder) eventMap() (Event, bool, error) {
	n, err := d.length(d.DecodeMapLen, 1, d.size)
	if err != nil {
		return Event{}, false, err
	}
	e := Event{Tier: true}
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return Event{}, false, err
		}
		if key == "type" {
			tag, err := d.DecodeString()
			if err != nil {
				return Event{}, false, fmt.Errorf("type: %w", err)
			}
			e.Kind = newEvent(tag).Kind
			continue
		}
		if err := d.field(&e, key); err != nil {
			return Event{}, false, fmt.Errorf("%s: %w", key, err)
		}
	}
	if e.Kind == 0 {
		return Event{}, false, nil
	}
	e.findSalt()
	return e, true, e.check()
}

func newEvent(tag string) Event {
	e := Event{Tier: true}
	switch tag {
	case "BlockStored":
		e.Kind = Stored
	case "BlockRemoved":
		e.Kind = Removed
	case "AllBlocksCleared":
		e.Kind = Cleared
	}
	return e
}

// field reads the value of one named field into e; a field this package
// does not use is skipped.
func (d decoder) field(e *Event, name string) (err error) {
	switch name {
	case "block_hashes":
		e.Hashes, err = d.hashes()
	case "parent_block_hash":
		e.Parent, e.HasParent, err = d.optionalHash()
	case "token_ids":
		e.Tokens, err = d.tokens()
	case "block_size":
		var n int64
		n, err = d.DecodeInt64()
		if err == nil && (n < 1 || n > MaxBlockSize) {
			err = fmt.Errorf("block size %d out of range", n)
		}
		e.BlockSize = int(n)
	case "medium":
		var medium string
		if medium, err = d.optionalString(); err == nil && medium != "" && medium != gpuMedium {
			e.Tier = false
		}
	case "lora_name":
		e.Identity, err = d.optionalString()
	case "extra_keys":
		e.extra, err = d.firstExtraStrings()
	case "group_idx":
		var group int64
		if group, err = d.optionalInt(); err == nil && group != 0 {
			e.Tier = false
		}
	default:
		err = d.Skip()
	}
	return err
}

// maxExtraStrings bounds the strings kept of a block's extra keys: an
// adapter's name, a few multimodal identifiers, the salt.
const maxExtraStrings = 16

// firstExtraStrings reads extra_keys, one entry per block (a tuple, or
// nil), and returns the strings of the first block's, the only one a
// cache_salt enters; the rest is skipped.
func (d decoder) firstExtraStrings() ([]string, error) {
	code, err := d.PeekCode()
	if err != nil || code == msgpcode.Nil {
		return nil, d.Skip()
	}
	n, err := d.length(d.DecodeArrayLen, 0, MaxBlocksPerEvent)
	if err != nil || n == 0 {
		return nil, err
	}
	var out []string
	if code, err = d.PeekCode(); err == nil && isArray(code) {
		out, err = d.tupleStrings()
	} else if err == nil {
		err = d.Skip()
	}
	if err != nil {
		return nil, err
	}
	return out, d.skip(n - 1)
}

// tupleStrings reads an array and returns its string items, skipping the
// others (integers, bytes, nested tuples).
func (d decoder) tupleStrings() ([]string, error) {
	n, err := d.length(d.DecodeArrayLen, 0, d.size)
	if err != nil {
		return nil, err
	}
	var out []string
	for range n {
		code, err := d.PeekCode()
		if err != nil {
			return nil, err
		}
		if !msgpcode.IsString(code) || len(out) == maxExtraStrings {
			if err := d.Skip(); err != nil {
				return nil, err
			}
			continue
		}
		s, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// findSalt sets the salt of a chain's first block from its extra keys'
// strings, which vLLM lays out as the adapter's name (when the event has
// one), the multimodal identifiers (tuples in current vLLM, skipped), then
// the salt: the first string after the adapter's name. An engine that keys
// multimodal inputs by bare strings (vLLM before the tuples) makes an
// image's identifier look like a salt: such a prompt then matches nothing,
// a lost hit, never a false one.
func (e *Event) findSalt() {
	extra := e.extra
	e.extra = nil
	if e.Kind != Stored || e.HasParent {
		return
	}
	if len(extra) > 0 && e.Identity != "" && extra[0] == e.Identity {
		extra = extra[1:]
	}
	if len(extra) > 0 {
		e.Salt = extra[0]
	}
}

func (d decoder) hashes() ([]EngineHash, error) {
	n, err := d.length(d.DecodeArrayLen, 0, MaxBlocksPerEvent)
	if err != nil {
		return nil, err
	}
	hs := make([]EngineHash, n)
	for i := range hs {
		if hs[i], err = d.hash(); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func (d decoder) optionalHash() (EngineHash, bool, error) {
	code, err := d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if code == msgpcode.Nil {
		return 0, false, d.DecodeNil()
	}
	h, err := d.hash()
	// An integer 0 is "no parent" as well as nil: llm-d's positional
	// encoding sends its empty block hash, 0, for a chain's first block.
	return h, err == nil && h != 0, err
}

// hash reads an integer hash as it is, and a bytes hash folded with xxh3.
func (d decoder) hash() (EngineHash, error) {
	code, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(code) || msgpcode.IsString(code) {
		b, err := d.DecodeBytes()
		return EngineHash(xxh3.Hash(b)), err
	}
	if code >= msgpcode.Uint8 && code <= msgpcode.Uint64 || code <= msgpcode.PosFixedNumHigh {
		v, err := d.DecodeUint64()
		return EngineHash(v), err
	}
	v, err := d.DecodeInt64()
	return EngineHash(uint64(v)), err
}

func (d decoder) tokens() ([]uint32, error) {
	n, err := d.length(d.DecodeArrayLen, 0, MaxTokensPerEvent)
	if err != nil {
		return nil, err
	}
	ts := make([]uint32, n)
	for i := range ts {
		v, err := d.DecodeInt64()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > 1<<32-1 {
			return nil, fmt.Errorf("token id %d out of range", v)
		}
		ts[i] = uint32(v)
	}
	return ts, nil
}

func (d decoder) optionalString() (string, error) {
	code, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	if code == msgpcode.Nil {
		return "", d.DecodeNil()
	}
	return d.DecodeString()
}

func (d decoder) optionalInt() (int64, error) {
	code, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if code == msgpcode.Nil {
		return 0, d.DecodeNil()
	}
	return d.DecodeInt64()
}

// length reads a collection's length and refuses one below least or above
// most, or one that the rest of the payload could not hold (every element
// takes at least a byte), before anything is allocated for it.
func (d decoder) length(read func() (int, error), least, most int) (int, error) {
	n, err := read()
	if err != nil {
		return 0, err
	}
	if n < least || n > most || n > d.size {
		return 0, fmt.Errorf("length %d outside [%d, %d]", n, least, min(most, d.size))
	}
	return n, nil
}

func (d decoder) skip(n int) error {
	for range n {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func isArray(code byte) bool {
	return msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32
}

func isMap(code byte) bool {
	return msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32
}

// check refuses a Stored event whose tokens do not fill its blocks exactly:
// its keys could not be computed.
func (e Event) check() error {
	if e.Kind != Stored {
		return nil
	}
	if e.BlockSize < 1 || len(e.Tokens) != len(e.Hashes)*e.BlockSize {
		return fmt.Errorf("%d tokens for %d blocks of %d", len(e.Tokens), len(e.Hashes), e.BlockSize)
	}
	return nil
}
