package loadsync

import (
	"sync"
	"time"
)

// manualClock is a Clock whose time moves only when a test steps it; each
// step also fires its tickers.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []chan time.Time
}

func newManualClock() *manualClock { return &manualClock{now: t0} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTicker(time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.tickers = append(c.tickers, ch)
	return ch, func() {}
}

// step advances the time by d and fires every ticker (a tick not yet taken
// is not doubled: like time.Ticker, a slow reader misses ticks).
func (c *manualClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, ch := range c.tickers {
		select {
		case ch <- c.now:
		default:
		}
	}
}
