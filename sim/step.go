package sim

import "time"

// stepBatch is the step being composed or computed: its sequences (a prompt chunk each, or a
// decode token when chunk is 0) and the adapters it loads.
type stepBatch struct {
	seqs  []*sequence
	swaps int // adapters loaded for the step being composed
}

// addDecode puts one token of a sequence's generation in the batch.
func (b *stepBatch) addDecode(s *sequence) {
	s.chunk = 0
	b.seqs = append(b.seqs, s)
}

// addPrefill puts the next chunk of a sequence's prompt in the batch and returns its size.
func (b *stepBatch) addPrefill(s *sequence, budget int) int {
	s.chunk = min(s.prefillLeft, budget)
	b.seqs = append(b.seqs, s)
	return s.chunk
}

func (b *stepBatch) scheduleDecodes(running []*sequence, at time.Duration) int {
	n := 0
	for _, s := range running {
		if s.prefillLeft == 0 && s.ready(at) {
			b.addDecode(s)
			n++
		}
	}
	return n
}

func (b *stepBatch) schedulePrefills(running []*sequence, at time.Duration, budget int) (tokens, left int) {
	for _, s := range running {
		if budget <= 0 {
			break
		}
		if s.prefillLeft > 0 && s.ready(at) {
			c := b.addPrefill(s, budget)
			tokens += c
			budget -= c
		}
	}
	return tokens, budget
}

// startStep composes the batch of the step that begins at time at and schedules its end. Running
// sequences come first (one token for each decode, then prefill chunks in admission order), then
// waiting sequences are admitted while a sequence slot, the KV and the token budget allow. With
// nothing to compute the engine idles, waking for the earliest pending KV transfer if any.
func (e *Engine) startStep(at time.Duration) {
	e.batch.seqs = e.batch.seqs[:0]
	e.batch.swaps = 0
	e.lora.ran()
	usage := e.KVUsage()
	decodes := e.batch.scheduleDecodes(e.running.seqs, at)
	budget := e.cfg.MaxBatchedTokens - decodes
	newTokens, budget := e.batch.schedulePrefills(e.running.seqs, at, budget)
	admittedTokens, admittedDecodes := e.admitWaiting(at, budget)
	newTokens += admittedTokens
	decodes += admittedDecodes
	if len(e.batch.seqs) == 0 {
		e.stepping = false
		e.wakeAt, e.waking = e.running.earliestReady()
		return
	}
	d := e.cfg.PrefillCost(newTokens)
	if decodes > 0 {
		d += e.cfg.DecodeCost(usage)
	}
	d += millis(e.cfg.LoraSwapMs * float64(e.batch.swaps))
	d = time.Duration(float64(d) * e.cfg.Slowdown)
	e.stepping, e.waking = true, false
	e.stepEnd = at + max(d, 1)
}

// admitWaiting admits waiting sequences in their order (arrival, or priority) and schedules those
// ready to compute. One whose LoRA adapter the batch has no room for is skipped, and the next
// considered, as vLLM's scheduler does; one whose KV does not fit stops admission.
func (e *Engine) admitWaiting(at time.Duration, budget int) (tokens, decodes int) {
	for i := e.waiting.head; budget > 0 && len(e.running.seqs) < e.cfg.MaxNumSeqs; {
		s := e.waiting.nextAdmissible(&i, &e.lora, e.cfg.MaxLoras)
		if s == nil || !e.kv.admit(s, at) {
			break
		}
		head := i == e.waiting.head
		e.waiting.take(i)
		if head {
			i = e.waiting.head // the head moved on (and the queue may have been compacted)
		}
		e.running.add(s)
		if e.lora.start(s.adapter, e.cfg.MaxLoras) {
			e.batch.swaps++
		}
		e.kv.markComputed(s)
		if !s.ready(at) {
			continue
		}
		if s.prefillLeft == 0 {
			e.batch.addDecode(s)
			decodes++
			budget--
			continue
		}
		c := e.batch.addPrefill(s, budget)
		tokens += c
		budget -= c
	}
	return tokens, decodes
}

// finishStep applies the step that ends at time at: prefill chunks become KV, a completed prompt
// yields its first token, decodes yield one token each, and sequences that reached MaxTokens
// finish and release their blocks.
func (e *Engine) finishStep(at time.Duration) {
	e.stepping = false
	for _, s := range e.batch.seqs {
		if !s.cancelled {
			e.progress(s, at)
		}
	}
	e.batch.seqs = e.batch.seqs[:0]
	e.running.dropFinished()
}

func (e *Engine) progress(s *sequence, at time.Duration) {
	if s.chunk > 0 {
		s.prefillLeft -= s.chunk
		s.kvTokens += s.chunk
		e.computedTokens += uint64(s.chunk)
		s.chunk = 0
		e.kv.markComputed(s)
		if s.prefillLeft > 0 {
			return
		}
	} else {
		e.kv.markComputed(s) // a transferred prompt becomes shareable once it arrived
	}
	s.generated++
	e.generated++
	switch {
	case s.generated == 1:
		e.emit(s, FirstToken, at)
	case s.stream:
		e.emit(s, Token, at)
	}
	if s.generated >= s.maxTokens {
		e.emit(s, Done, at)
		countAdapter(e.lora.running, s.adapter, -1)
		e.kv.release(s)
		delete(e.byID, s.id)
		s.finished = true
	}
}
