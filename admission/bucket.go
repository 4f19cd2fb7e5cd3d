package admission

import "time"

// bucket is a token bucket on caller-given time: burst tokens at most,
// refilled at rate per second. A zero rate never runs dry.
type bucket struct {
	rate   float64
	burst  float64
	tokens float64
	at     time.Time
}

func newBucket(rate float64, burst int) bucket {
	return bucket{rate: rate, burst: float64(max(burst, 1)), tokens: float64(max(burst, 1))}
}

func (b *bucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.at = now
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.at = now
	}
}

// ready reports whether a token is there at now.
func (b *bucket) ready(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	b.refill(now)
	return b.tokens >= 1
}

// take spends a token; call after ready.
func (b *bucket) take() {
	if b.rate > 0 {
		b.tokens--
	}
}
