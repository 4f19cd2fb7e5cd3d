package core

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/affinity"
)

// The adapter report: what one replica saw of the workers' LoRA adapters,
// for its peers (adapters.go). A gossip message type of its own, riding
// the gossip as a loadsync.Channel:
//
//	AdapterReportType, adapterWireVersion, uvarint len(origin), origin,
//	then records to the end of the packet, each
//	  uvarint worker, uvarint slots (the engine's max_lora; 0 unknown),
//	  uvarint n (at most maxReportEntries), n entries of
//	    8 bytes key (little-endian), 1 byte flags (flagEngineBusy),
//	    uvarint in flight, uvarint milliseconds since last active.
//
// An entry is about 12 bytes: a worker running two adapters costs some 30
// bytes, so one packet carries some forty workers.

// AdapterReportType is the first byte of an adapter report: a gossip
// message type no other message of the tier uses (loadsync's wire.go lists
// 1-10, the KV-event relay is 11).
const AdapterReportType byte = 12

const adapterWireVersion byte = 1

// Bounds on what a report may claim: a record's entries (the adapters a
// replica reports of one worker, its most recent), an origin's name, and
// what one entry's counts may say.
const (
	maxReportEntries  = 16
	maxOriginBytes    = 128
	maxReportInFlight = 1 << 24
	maxReportAgeMs    = 1 << 40
)

// ErrAdapterReport wraps every refusal of an adapter report.
var ErrAdapterReport = errors.New("core: malformed adapter report")

// flagEngineBusy: the reporter's latest reading of the worker's engine
// shows the adapter running or waiting.
const flagEngineBusy byte = 1

// adapterRecord is what one replica reports of one worker.
type adapterRecord struct {
	worker  affinity.WorkerID
	slots   int
	entries []adapterEntry
}

// adapterEntry is one adapter of a record.
type adapterEntry struct {
	key        affinity.AdapterKey
	engineBusy bool
	inFlight   int64
	ageMs      int64 // since it was last active, at the report's sending
}

// recordBytes bounds a record's encoded size.
func recordBytes(r adapterRecord) int {
	return 3*binary.MaxVarintLen32 + len(r.entries)*(9+binary.MaxVarintLen32+binary.MaxVarintLen64)
}

// packRecords lays records out in packets of at most maxBytes from origin,
// at most maxPackets of them, and returns the packets and how many records
// they hold (the first that many).
func packRecords(origin string, records []adapterRecord, maxBytes, maxPackets int) ([][]byte, int) {
	var pkts [][]byte
	var cur []byte
	n := 0
	for _, r := range records {
		if cur != nil && len(cur)+recordBytes(r) > maxBytes {
			pkts, cur = append(pkts, cur), nil
		}
		if cur == nil {
			if len(pkts) == maxPackets {
				break
			}
			cur = appendReportHeader(make([]byte, 0, maxBytes), origin)
		}
		cur = appendRecord(cur, r)
		n++
	}
	if cur != nil {
		pkts = append(pkts, cur)
	}
	return pkts, n
}

func appendReportHeader(b []byte, origin string) []byte {
	b = append(b, AdapterReportType, adapterWireVersion)
	b = binary.AppendUvarint(b, uint64(len(origin)))
	return append(b, origin...)
}

func appendRecord(b []byte, r adapterRecord) []byte {
	b = binary.AppendUvarint(b, uint64(r.worker))
	b = binary.AppendUvarint(b, uint64(r.slots))
	b = binary.AppendUvarint(b, uint64(len(r.entries)))
	for _, e := range r.entries {
		b = binary.LittleEndian.AppendUint64(b, uint64(e.key))
		var flags byte
		if e.engineBusy {
			flags |= flagEngineBusy
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(e.inFlight))
		b = binary.AppendUvarint(b, uint64(e.ageMs))
	}
	return b
}

// decodeReport reads a report: its origin and its records. Nothing is
// allocated beyond what the packet's length allows.
func decodeReport(pkt []byte) (string, []adapterRecord, error) {
	if len(pkt) < 3 || pkt[0] != AdapterReportType || pkt[1] != adapterWireVersion {
		return "", nil, fmt.Errorf("%w: type or version", ErrAdapterReport)
	}
	r := reportReader{b: pkt[2:]}
	n := r.uvarint(maxOriginBytes)
	origin := string(r.bytes(int(n)))
	var records []adapterRecord
	for r.err == nil && len(r.b) > 0 {
		records = append(records, r.record())
	}
	if r.err != nil {
		return "", nil, r.err
	}
	return origin, records, nil
}

// reportReader reads a report's fields, keeping the first error.
type reportReader struct {
	b   []byte
	err error
}

func (r *reportReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrAdapterReport, what)
	}
	r.b = nil
}

func (r *reportReader) uvarint(most uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > most {
		r.fail("a number out of range")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reportReader) bytes(n int) []byte {
	if n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reportReader) record() adapterRecord {
	rec := adapterRecord{worker: affinity.WorkerID(r.uvarint(1<<32 - 1)), slots: int(r.uvarint(1 << 16))}
	n := int(r.uvarint(maxReportEntries))
	if n*11 > len(r.b) { // every entry takes at least 11 bytes
		r.fail("more entries than bytes")
		return rec
	}
	rec.entries = make([]adapterEntry, 0, n)
	for range n {
		key := r.bytes(8)
		flags := r.bytes(1)
		e := adapterEntry{inFlight: int64(r.uvarint(maxReportInFlight)), ageMs: int64(r.uvarint(maxReportAgeMs))}
		if r.err != nil {
			return rec
		}
		e.key, e.engineBusy = affinity.AdapterKey(binary.LittleEndian.Uint64(key)), flags[0]&flagEngineBusy != 0
		if e.key == 0 {
			r.fail("key 0")
			return rec
		}
		rec.entries = append(rec.entries, e)
	}
	return rec
}
