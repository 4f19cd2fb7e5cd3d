package sim

import "time"

// startStep composes the batch of the step that begins at time at and schedules its end. Running
// sequences come first (one token for each decode, then prefill chunks in admission order), then
// waiting sequences are admitted while a sequence slot, the KV and the token budget allow. With
// nothing to compute the engine idles, waking for the earliest pending KV transfer if any.
func (e *Engine) startStep(at time.Duration) {
	e.batch = e.batch[:0]
	e.swaps = 0
	e.lora.ran()
	usage := e.KVUsage()
	decodes := e.scheduleDecodes(at)
	budget := e.cfg.MaxBatchedTokens - decodes
	newTokens, budget := e.schedulePrefills(at, budget)
	admittedTokens, admittedDecodes := e.admitWaiting(at, budget)
	newTokens += admittedTokens
	decodes += admittedDecodes
	if len(e.batch) == 0 {
		e.stepping = false
		e.armWake()
		return
	}
	d := e.cfg.PrefillCost(newTokens)
	if decodes > 0 {
		d += e.cfg.DecodeCost(usage)
	}
	d += millis(e.cfg.LoraSwapMs * float64(e.swaps))
	d = time.Duration(float64(d) * e.cfg.Slowdown)
	e.stepping, e.waking = true, false
	e.stepEnd = at + max(d, 1)
}

func (e *Engine) scheduleDecodes(at time.Duration) int {
	n := 0
	for _, s := range e.running {
		if s.prefillLeft == 0 && s.ready(at) {
			s.chunk = 0
			e.batch = append(e.batch, s)
			n++
		}
	}
	return n
}

func (e *Engine) schedulePrefills(at time.Duration, budget int) (tokens, left int) {
	for _, s := range e.running {
		if budget <= 0 {
			break
		}
		if s.prefillLeft > 0 && s.ready(at) {
			c := e.addPrefill(s, budget)
			tokens += c
			budget -= c
		}
	}
	return tokens, budget
}

// addPrefill puts the next chunk of a sequence's prompt in the batch and returns its size.
func (e *Engine) addPrefill(s *sequence, budget int) int {
	s.chunk = min(s.prefillLeft, budget)
	e.batch = append(e.batch, s)
	return s.chunk
}

// admitWaiting admits waiting sequences in their order (arrival, or priority) and schedules those
// ready to compute. One whose LoRA adapter the batch has no room for is skipped, and the next
// considered, as vLLM's scheduler does; one whose KV does not fit stops admission.
func (e *Engine) admitWaiting(at time.Duration, budget int) (tokens, decodes int) {
	for i := e.waitingHead; budget > 0 && len(e.running) < e.cfg.MaxNumSeqs; {
		s := e.nextAdmissible(&i)
		if s == nil || !e.admit(s, at) {
			break
		}
		head := i == e.waitingHead
		e.takeWaiting(i)
		if head {
			i = e.waitingHead // the head moved on (and the queue may have been compacted)
		}
		e.waitingLen--
		e.running = append(e.running, s)
		e.startAdapter(s)
		e.markComputed(s)
		if !s.ready(at) {
			continue
		}
		if s.prefillLeft == 0 {
			s.chunk = 0
			e.batch = append(e.batch, s)
			decodes++
			budget--
			continue
		}
		c := e.addPrefill(s, budget)
		tokens += c
		budget -= c
	}
	return tokens, decodes
}

// nextAdmissible is the first live waiting sequence at or after index *i that the LoRA bound
// lets into the batch, *i set to its index; nil when there is none. Cancelled entries at the head
// are dropped on the way.
func (e *Engine) nextAdmissible(i *int) *sequence {
	for ; *i < len(e.waiting); *i++ {
		s := e.waiting[*i]
		if s.cancelled && *i == e.waitingHead {
			e.popWaiting()
			*i = e.waitingHead - 1 // the loop's increment brings it to the new head
			continue
		}
		if !s.cancelled && e.lora.allows(s.adapter, e.cfg.MaxLoras) {
			return s
		}
	}
	return nil
}

// startAdapter counts an admitted sequence's adapter as running, loading it into a slot (at
// LoraSwapMs in this step) when it is not in one.
func (e *Engine) startAdapter(s *sequence) {
	countAdapter(e.lora.waiting, s.adapter, -1)
	countAdapter(e.lora.running, s.adapter, 1)
	if e.lora.activate(s.adapter, e.cfg.MaxLoras) {
		e.swaps++
	}
}

func (e *Engine) armWake() {
	e.waking = false
	for _, s := range e.running {
		if !e.waking || s.readyAt < e.wakeAt {
			e.waking, e.wakeAt = true, s.readyAt
		}
	}
}

// finishStep applies the step that ends at time at: prefill chunks become KV, a completed prompt
// yields its first token, decodes yield one token each, and sequences that reached MaxTokens
// finish and release their blocks.
func (e *Engine) finishStep(at time.Duration) {
	e.stepping = false
	for _, s := range e.batch {
		if !s.cancelled {
			e.progress(s, at)
		}
	}
	e.batch = e.batch[:0]
	e.dropFinished()
}

func (e *Engine) progress(s *sequence, at time.Duration) {
	if s.chunk > 0 {
		s.prefillLeft -= s.chunk
		s.kvTokens += s.chunk
		e.computedTokens += uint64(s.chunk)
		s.chunk = 0
		e.markComputed(s)
		if s.prefillLeft > 0 {
			return
		}
	} else {
		e.markComputed(s) // a transferred prompt becomes shareable once it arrived
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
		e.release(s)
		delete(e.byID, s.id)
		s.finished = true
	}
}

func (e *Engine) dropFinished() {
	kept := e.running[:0]
	for _, s := range e.running {
		if !s.finished {
			kept = append(kept, s)
		}
	}
	clear(e.running[len(kept):])
	e.running = kept
}
