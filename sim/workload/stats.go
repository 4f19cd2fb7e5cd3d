package workload

import "time"

// TraceStats summarises a trace. The hit rates are those of an infinite prefix cache seen by one
// global router: the bound that no routing can beat on the trace.
type TraceStats struct {
	Requests     int           // number of records
	Duration     time.Duration // last arrival minus first arrival
	InputTokens  int64         // sum of input lengths, in tokens
	OutputTokens int64         // sum of output lengths, in tokens
	Blocks       int           // block ids over all records, repeats included
	// RepeatedBlocks counts the block ids that an earlier record (in slice order) already named.
	RepeatedBlocks int
	// BlockHitRate is RepeatedBlocks / Blocks (0 for an empty trace).
	BlockHitRate float64
	// TokenHitRate is the share of input tokens that lie in repeated blocks; a repeated block
	// that is the cut last block of either request counts only the tokens both have.
	TokenHitRate float64
}

// Stats computes the summary of records, taken in slice order.
func Stats(records []TraceRecord) TraceStats {
	var s TraceStats
	s.Requests = len(records)
	if len(records) == 0 {
		return s
	}
	first, last := records[0].Timestamp, records[0].Timestamp
	seen := make(map[int64]int) // block id -> most tokens of it seen so far
	var hitTokens int64
	for _, rec := range records {
		first, last = min(first, rec.Timestamp), max(last, rec.Timestamp)
		s.InputTokens += int64(rec.InputLength)
		s.OutputTokens += int64(rec.OutputLength)
		for i, id := range rec.HashIDs {
			size := blockTokensAt(rec, i)
			if earlier, ok := seen[id]; ok {
				s.RepeatedBlocks++
				hitTokens += int64(min(size, earlier))
				size = max(size, earlier)
			}
			seen[id] = size
		}
		s.Blocks += len(rec.HashIDs)
	}
	s.Duration = last - first
	if s.Blocks > 0 {
		s.BlockHitRate = float64(s.RepeatedBlocks) / float64(s.Blocks)
	}
	if s.InputTokens > 0 {
		s.TokenHitRate = float64(hitTokens) / float64(s.InputTokens)
	}
	return s
}

// blockTokensAt returns how many of rec's tokens lie in its i-th block: BlockTokens, except for
// a cut last block.
func blockTokensAt(rec TraceRecord, i int) int {
	rest := rec.InputLength - i*BlockTokens
	return max(0, min(rest, BlockTokens))
}
