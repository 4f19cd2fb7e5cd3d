package loadsync

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
	"time"
)

// Verdict is one replica's judgement that a worker should get no traffic
// (wedged, degraded, ...), shared so that the other replicas act on it too.
// Kind is the caller's code, opaque here; Since is when the judgement began,
// in unix nanoseconds on the judging replica's clock.
type Verdict struct {
	Worker uint32
	Kind   uint8
	Since  int64
}

// verdictWithdrawReports is how many reports announce an empty set after an
// origin's verdicts end, so that a peer that missed one still learns of the
// withdrawal at once rather than after LoadTTL.
const verdictWithdrawReports = 3

// verdictReport is an origin's whole set of verdicts, versioned like its
// load report (the two share a sequence number). Verdicts are soft state:
// an origin repeats a non-empty set every LoadInterval, and receivers drop a
// set not refreshed for LoadTTL, so a lost withdrawal costs at most that.
//
// Layout after the header: origin (string), epoch, seq, count (uvarints),
// then count entries of (worker uvarint, kind byte, since signed varint).
type verdictReport struct {
	origin     string
	epoch, seq uint64
	verdicts   []Verdict
}

// verdictMinBytes is the smallest encoding of one entry.
const verdictMinBytes = 3

func verdictBytes(v Verdict) int { return uvarintLen(uint64(v.Worker)) + 1 + varintLen(v.Since) }

func appendVerdictReport(b []byte, rep *verdictReport) []byte {
	b = appendHeader(b, msgVerdicts)
	b = appendString(b, rep.origin)
	b = binary.AppendUvarint(b, rep.epoch)
	b = binary.AppendUvarint(b, rep.seq)
	b = binary.AppendUvarint(b, uint64(len(rep.verdicts)))
	for _, v := range rep.verdicts {
		b = binary.AppendUvarint(b, uint64(v.Worker))
		b = append(b, v.Kind)
		b = binary.AppendVarint(b, v.Since)
	}
	return b
}

func decodeVerdictReport(r *reader) (verdictReport, error) {
	rep := verdictReport{origin: r.str(), epoch: r.uvarint(), seq: r.uvarint()}
	n := r.count(verdictMinBytes)
	if r.err() != nil {
		return verdictReport{}, r.err()
	}
	for range n {
		v := Verdict{Worker: r.uint32v(), Kind: r.byte(), Since: r.varint()}
		if r.err() != nil {
			return verdictReport{}, r.err()
		}
		rep.verdicts = append(rep.verdicts, v)
	}
	return rep, r.end()
}

// packVerdicts encodes rep in one packet of at most maxBytes, keeping the
// verdicts that fit and returning how many it had to leave out. A replica
// with more verdicts than a packet holds (some 70) shares the first ones;
// every replica still judges each worker itself.
func packVerdicts(rep verdictReport, maxBytes int) ([]byte, int) {
	budget := maxBytes - headerBytes - uvarintLen(uint64(len(rep.origin))) - len(rep.origin) -
		3*binary.MaxVarintLen64
	n, used := 0, 0
	for n < len(rep.verdicts) && used+verdictBytes(rep.verdicts[n]) <= budget {
		used += verdictBytes(rep.verdicts[n])
		n++
	}
	left := len(rep.verdicts) - n
	rep.verdicts = rep.verdicts[:n]
	return appendVerdictReport(make([]byte, 0, maxBytes), &rep), left
}

// normalizeVerdicts sorts verdicts by worker and kind and keeps the first of
// duplicates, in place.
func normalizeVerdicts(vs []Verdict) []Verdict {
	slices.SortStableFunc(vs, compareVerdicts)
	return slices.CompactFunc(vs, func(a, b Verdict) bool { return compareVerdicts(a, b) == 0 })
}

func compareVerdicts(a, b Verdict) int {
	return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Kind, b.Kind))
}

// originVerdicts is what one peer last told us about its verdicts.
type originVerdicts struct {
	epoch, seq uint64
	verdicts   []Verdict // nil when it holds none
	lastHeard  time.Time
}

// verdictView holds the peers' verdicts. It is not safe for concurrent use;
// verdicts guards it with its mu.
type verdictView struct {
	ttl      time.Duration
	origins  map[string]*originVerdicts
	onChange func(origin string, verdicts []Verdict)
}

func newVerdictView(ttl time.Duration, onChange func(string, []Verdict)) verdictView {
	return verdictView{ttl: ttl, origins: make(map[string]*originVerdicts), onChange: onChange}
}

// apply merges one report and reports whether it was newer than what was
// held for its origin.
func (v *verdictView) apply(rep *verdictReport, now time.Time) bool {
	o := v.origins[rep.origin]
	switch {
	case o == nil:
		o = &originVerdicts{}
		v.origins[rep.origin] = o
	case rep.epoch < o.epoch, rep.epoch == o.epoch && rep.seq <= o.seq:
		return false
	}
	o.epoch, o.seq, o.lastHeard = rep.epoch, rep.seq, now
	v.set(rep.origin, o, rep.verdicts)
	return true
}

// set replaces o's verdicts and tells the callback when they changed.
func (v *verdictView) set(origin string, o *originVerdicts, vs []Verdict) {
	if len(vs) == 0 {
		vs = nil
	}
	if slices.Equal(o.verdicts, vs) {
		return
	}
	o.verdicts = slices.Clone(vs)
	if v.onChange != nil {
		v.onChange(origin, slices.Clone(vs))
	}
}

// forget drops origin's verdicts at once. The entry stays until the TTL so
// that late copies of its last report are recognised as old: a report is one
// packet, so unlike a load report no copy of the same sequence is news.
func (v *verdictView) forget(origin string) {
	if o := v.origins[origin]; o != nil {
		v.set(origin, o, nil)
	}
}

// expire drops every origin not heard from for longer than the TTL.
func (v *verdictView) expire(now time.Time) {
	for name, o := range v.origins {
		if now.Sub(o.lastHeard) > v.ttl {
			v.set(name, o, nil)
			delete(v.origins, name)
		}
	}
}

// verdicts is this replica's side of the verdict gossip: its own verdicts
// as last read, and the peers' as they arrive.
type verdicts struct {
	mu   sync.Mutex
	view verdictView // the peers' verdicts, under mu
	// own is this replica's verdicts as last read, and withdrawing how
	// many more reports announce their withdrawal; only Tick's report
	// reads and writes them.
	own         []Verdict
	withdrawing int
	cfg         *Config
	stats       *counters
}

// report returns this tick's verdict packet, numbered seq, if any: the
// current set while it is not empty, and an empty set for a few reports
// after it empties.
func (s *verdicts) report(seq uint64) [][]byte {
	if s.cfg.LocalVerdicts == nil {
		return nil
	}
	s.own = normalizeVerdicts(s.cfg.LocalVerdicts(s.own[:0]))
	switch {
	case len(s.own) > 0:
		s.withdrawing = verdictWithdrawReports
	case s.withdrawing > 0:
		s.withdrawing--
	default:
		return nil
	}
	pkt, left := packVerdicts(verdictReport{origin: s.cfg.Origin, epoch: s.cfg.BootEpoch, seq: seq, verdicts: s.own},
		s.cfg.MaxPacketBytes)
	s.stats.verdictsUnsent.Add(uint64(left))
	return [][]byte{pkt}
}

func (s *verdicts) receive(r *reader, now time.Time) error {
	rep, err := decodeVerdictReport(r)
	if err != nil {
		return err
	}
	if rep.origin == s.cfg.Origin {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view.expire(now)
	if !s.view.apply(&rep, now) {
		s.stats.reportsStale.Add(1)
	}
	return nil
}

// expire drops the verdicts of origins not heard from within LoadTTL.
func (s *verdicts) expire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view.expire(now)
}

// forget drops origin's verdicts at once.
func (s *verdicts) forget(origin string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view.forget(origin)
}
