package loadsync

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
)

// Calibration is what one replica learned from the engines' answers about a
// worker since its last report: how many of the hits it predicted there the
// engine backed (Held) and how many it did not (Missed). A peer applies the
// same correction to its own index, so a worker whose engine evicted a
// prefix stops attracting it on every replica, not only on the one that saw
// the answer.
type Calibration struct {
	Worker       uint32
	Held, Missed uint32
}

// Bounds on calibrations, sent and received.
const (
	// maxCalibrationWorkers bounds the workers one replica holds pending
	// calibrations for between two reports; the judgements of any further
	// worker are dropped and counted. Only workers the replica routed to are
	// judged, so a registry of that size never reaches it.
	maxCalibrationWorkers = 4096
	// maxCalibrationCount caps each count of one received entry: a peer
	// judges a handful of answers per worker and interval, and a forged
	// count must not cost the receiver more work than that.
	maxCalibrationCount = 64
	// calibrationMinBytes is the smallest encoding of one entry.
	calibrationMinBytes = 3
)

// calibrationQueue gathers this replica's judgements per worker until the
// next report. Not safe for concurrent use; calibrations guards it with its mu.
type calibrationQueue struct {
	pending map[uint32]*Calibration
	scratch []Calibration
}

// add counts one judgement of worker and reports whether it was kept.
func (q *calibrationQueue) add(worker uint32, held bool) bool {
	c := q.pending[worker]
	if c == nil {
		if len(q.pending) >= maxCalibrationWorkers {
			return false
		}
		if q.pending == nil {
			q.pending = make(map[uint32]*Calibration)
		}
		c = &Calibration{Worker: worker}
		q.pending[worker] = c
	}
	if held {
		c.Held++
	} else {
		c.Missed++
	}
	return true
}

// take empties the queue into scratch, in worker order (so a simulated run
// repeats byte for byte), and returns it.
func (q *calibrationQueue) take() []Calibration {
	out := q.scratch[:0]
	for w, c := range q.pending {
		out = append(out, *c)
		delete(q.pending, w)
	}
	slices.SortFunc(out, func(a, b Calibration) int { return cmp.Compare(a.Worker, b.Worker) })
	q.scratch = out
	return out
}

// Judged records the engine's answer to a hit this replica predicted on
// worker: held says the engine had the prefix cached. The judgements are
// summed per worker and sent to the peers with the next report, whose
// OnCalibration applies them. Called on the request path; it does not
// allocate once the worker has been judged before.
func (s *State) Judged(worker uint32, held bool) { s.calibs.judged(worker, held) }

// calibrations is this replica's side of the calibration gossip: the
// judgements made here since the last report, and the peers' handed on.
type calibrations struct {
	mu    sync.Mutex
	queue calibrationQueue // judgements of predicted hits since the last report
	cfg   *Config
	stats *counters
}

func (s *calibrations) judged(worker uint32, held bool) {
	s.mu.Lock()
	kept := s.queue.add(worker, held)
	s.mu.Unlock()
	if !kept {
		s.stats.calibrationsDropped.Add(1)
	}
}

// take empties the pending calibrations into a slice of their own, in
// worker order, and counts them sent.
func (s *calibrations) take() []Calibration {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := slices.Clone(s.queue.take())
	s.stats.calibrationsSent.Add(uint64(len(cs)))
	return cs
}

// legacy packs calibrations into msgCalibrations packets of at most
// MaxPacketBytes, for peers that do not read msgReport.
func (s *calibrations) legacy(cs []Calibration) [][]byte {
	budget := s.cfg.MaxPacketBytes - headerBytes - uvarintLen(uint64(len(s.cfg.Origin))) - len(s.cfg.Origin) -
		binary.MaxVarintLen32
	var pkts [][]byte
	for _, chunk := range chunkCalibrations(cs, budget) {
		pkts = append(pkts, appendCalibrations(make([]byte, 0, s.cfg.MaxPacketBytes), s.cfg.Origin, chunk))
	}
	return pkts
}

// chunkCalibrations cuts cs into runs whose entries fit budget bytes each.
func chunkCalibrations(cs []Calibration, budget int) [][]Calibration {
	var out [][]Calibration
	for len(cs) > 0 {
		n, used := 0, 0
		for n < len(cs) && (n == 0 || used+calibrationBytes(cs[n]) <= budget) {
			used += calibrationBytes(cs[n])
			n++
		}
		out = append(out, cs[:n])
		cs = cs[n:]
	}
	return out
}

func calibrationBytes(c Calibration) int {
	return uvarintLen(uint64(c.Worker)) + uvarintLen(uint64(c.Held)) + uvarintLen(uint64(c.Missed))
}

// appendCalibrations encodes calibrations as header, origin (string), then
// their body.
func appendCalibrations(b []byte, origin string, cs []Calibration) []byte {
	b = appendHeader(b, msgCalibrations)
	b = appendString(b, origin)
	return appendCalibrationsBody(b, cs)
}

// appendCalibrationsBody encodes calibrations as a count, then entries of
// (worker, held, missed uvarints).
func appendCalibrationsBody(b []byte, cs []Calibration) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for _, c := range cs {
		b = binary.AppendUvarint(b, uint64(c.Worker))
		b = binary.AppendUvarint(b, uint64(c.Held))
		b = binary.AppendUvarint(b, uint64(c.Missed))
	}
	return b
}

func decodeCalibrations(r *reader) (string, []Calibration, error) {
	origin := r.str()
	cs, err := decodeCalibrationsBody(r)
	if err != nil {
		return "", nil, err
	}
	return origin, cs, r.end()
}

func decodeCalibrationsBody(r *reader) ([]Calibration, error) {
	n := r.count(calibrationMinBytes)
	if r.err() != nil {
		return nil, r.err()
	}
	cs := make([]Calibration, 0, n)
	for range n {
		c := Calibration{Worker: r.uint32v(), Held: r.uint32v(), Missed: r.uint32v()}
		if r.err() != nil {
			return nil, r.err()
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// receive hands a peer's calibrations of known workers, their
// counts capped, to OnCalibration.
func (s *calibrations) receive(r *reader) error {
	origin, cs, err := decodeCalibrations(r)
	if err != nil {
		return err
	}
	s.calibrated(origin, cs)
	return nil
}

// calibrated hands origin's calibrations of known workers, their counts
// capped, to OnCalibration.
func (s *calibrations) calibrated(origin string, cs []Calibration) {
	if origin == s.cfg.Origin || s.cfg.OnCalibration == nil {
		return
	}
	for _, c := range cs {
		if s.cfg.KnownWorker != nil && !s.cfg.KnownWorker(c.Worker) {
			continue
		}
		c.Held, c.Missed = min(c.Held, maxCalibrationCount), min(c.Missed, maxCalibrationCount)
		s.stats.calibrationsLearned.Add(1)
		s.cfg.OnCalibration(c)
	}
}
