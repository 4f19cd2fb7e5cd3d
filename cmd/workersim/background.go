package main

import "sync"

// goroutines owns the goroutines that outlive the request that started them (background
// responses). Go refuses new ones once Close has begun, and Close waits for the running ones,
// which end on their own when the server's stopping channel closes. Safe for concurrent use; the
// zero value is ready.
type goroutines struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs fn on a new goroutine; it reports false, running nothing, after Close.
func (g *goroutines) Go(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// Close refuses new goroutines and waits for the running ones. Idempotent.
func (g *goroutines) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
