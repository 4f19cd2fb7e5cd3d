package fleet

import "time"

// queueSampleInterval is how often, in virtual time, the run reads the
// routed workers' waiting queues: often enough for a queue that builds over
// seconds, rare enough to cost nothing next to the engines' steps.
const queueSampleInterval = time.Second

// queueDepth sums the routed (prefill, in a split fleet) workers' waiting
// queues, vllm:num_requests_waiting added up over them, at every sample.
type queueDepth struct {
	samples int
	sum     int64
	max     int
}

func (q *queueDepth) add(depth int) {
	q.samples++
	q.sum += int64(depth)
	q.max = max(q.max, depth)
}

func (q *queueDepth) mean() float64 { return ratio(float64(q.sum), float64(q.samples)) }

// startQueueSampling puts the first sample on the agenda.
func (s *simulation) startQueueSampling() {
	s.agenda.push(event{at: queueSampleInterval, kind: evSample})
}

// sampleQueues records the routed workers' waiting queues and schedules the
// next sample while requests are pending. It reads the engines as they stood
// after the last event handled and changes nothing, so it cannot alter the
// run it measures.
func (s *simulation) sampleQueues() {
	depth := 0
	for _, w := range s.workers[:s.cfg.routedWorkers()] {
		depth += w.engine.Waiting()
	}
	s.queues.add(depth)
	if s.pending > 0 {
		s.agenda.push(event{at: s.clock.Elapsed() + queueSampleInterval, kind: evSample})
	}
}
