package loadsync

import (
	"slices"
	"time"
)

// legacyReport encodes rep in the types the builds before msgReport read
// (v0.1.0 and earlier), as they sent it: the full report (msgLoad) or a
// cumulative delta on it (msgLoadDelta) with every report, the counted
// answers (msgCounted), the backlogs in full (msgBacklog) when they
// changed or half an interval after they were last sent, and the
// calibrations (msgCalibrations). Gossip sends these only to peers that do
// not read msgReport, so they cost the tier only while it is being
// upgraded. mu is held.
func (s *reporter) legacyReport(rep *report) [][]byte {
	var pkts [][]byte
	if rep.full {
		base := loadReport{origin: rep.origin, epoch: rep.epoch, seq: rep.seq, sentAt: rep.sentAt}
		s.lastFull = packLoadReport(base, s.loads, s.cfg.MaxPacketBytes)
		pkts = slices.Clone(s.lastFull)
	} else {
		if s.sinceFull == 1 {
			pkts = slices.Clone(s.lastFull)
		}
		d := loadDelta{origin: rep.origin, epoch: rep.epoch, seq: rep.seq, base: s.baseSeq, sentAt: rep.sentAt, entries: s.diff}
		pkts = append(pkts, appendLoadDelta(make([]byte, 0, loadEntriesBytes(s.diff, 0)+loadHeaderMaxBytes(rep.origin)), &d))
	}
	if rep.counted != nil {
		pkts = append(pkts, appendCounted(make([]byte, 0, 32+len(rep.counted.Also)*2), rep.origin, *rep.counted))
	}
	pkts = append(pkts, s.legacyBacklog(rep)...)
	return append(pkts, s.calibs.legacy(rep.calibs)...)
}

// legacyBacklog is the msgBacklog report that goes with rep: when the
// backlogs changed since the last one sent, or half an interval after it
// (peers expire what they do not hear of again). mu is held.
func (s *reporter) legacyBacklog(rep *report) [][]byte {
	at := time.Unix(0, rep.sentAt)
	if s.cfg.LocalBacklogs == nil || slices.Equal(s.backlogs, s.legacyBacklogs) && at.Sub(s.legacyBacklogAt) < s.cfg.LoadInterval/2 {
		return nil
	}
	s.legacyBacklogs = append(s.legacyBacklogs[:0], s.backlogs...)
	s.legacyBacklogAt = at
	base := loadReport{origin: rep.origin, epoch: rep.epoch, seq: rep.seq, sentAt: rep.sentAt, backlog: true}
	return packLoadReport(base, s.backlogs, s.cfg.MaxPacketBytes)
}
