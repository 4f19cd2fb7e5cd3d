package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// faultInjector holds the worker's current fault (--fault, /admin/fault) and plays the parts of
// it that are not the engine's: the errors fault's draws, the slow health checks and the crash's
// exit. The engine takes the slowdown and the wedge.
type faultInjector struct {
	fault    atomic.Pointer[fault]
	mu       sync.Mutex // serialises fault changes
	crash    *time.Timer
	exit     func(code int)
	engine   *driver
	rngMu    sync.Mutex
	rng      *rand.Rand
	stopping <-chan struct{} // closed when shutdown begins
}

// newFaultInjector starts with no fault; exit ends the process. Its engine is set once the
// driver exists, before any fault is.
func newFaultInjector(seed uint64, exit func(int), stopping <-chan struct{}) *faultInjector {
	f := &faultInjector{exit: exit, stopping: stopping,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	f.fault.Store(&fault{Mode: faultNone})
	return f
}

// load is the current fault.
func (fi *faultInjector) load() *fault { return fi.fault.Load() }

// mode is the current fault's mode.
func (fi *faultInjector) mode() faultMode { return fi.fault.Load().Mode }

// set makes f the current fault: it sets the engine's slowdown and wedge, and arms the exit
// of a crash (immediate without a delay).
func (fi *faultInjector) set(f fault) error {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if fi.crash != nil {
		fi.crash.Stop()
		fi.crash = nil
	}
	if err := fi.engine.SetSlowdown(f.slowdown()); err != nil {
		return fmt.Errorf("%w: %w", errBadFault, err)
	}
	fi.engine.SetWedged(f.Mode == faultWedge)
	fi.fault.Store(&f)
	if f.Mode != faultCrash {
		return nil
	}
	if f.DelayMs == 0 {
		fi.exit(crashExitCode)
		return nil
	}
	fi.crash = time.AfterFunc(time.Duration(f.DelayMs)*time.Millisecond, func() { fi.exit(crashExitCode) })
	return nil
}

// disarm stops a pending crash, as the worker shuts down.
func (fi *faultInjector) disarm() {
	fi.mu.Lock()
	if fi.crash != nil {
		fi.crash.Stop()
	}
	fi.mu.Unlock()
}

// drawError reports whether the errors fault fails this request.
func (fi *faultInjector) drawError() bool {
	f := fi.fault.Load()
	if f.Mode != faultErrors {
		return false
	}
	fi.rngMu.Lock()
	defer fi.rngMu.Unlock()
	return fi.rng.Float64() < f.Rate
}

// slowHealth holds a health check for the slow_health fault's delay.
func (fi *faultInjector) slowHealth() {
	f := fi.fault.Load()
	if f.Mode != faultSlowHealth {
		return
	}
	// Wall time on purpose: the delay is aimed at the router's health-check timeout.
	t := time.NewTimer(time.Duration(f.DelayMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-fi.stopping:
	}
}

// handleFault serves GET /admin/fault (the current fault) and POST /admin/fault (set one, with
// the JSON object {"mode","rate","factor","delay_ms"}; mode "none" clears).
func (a *engineAdmin) handleFault(ctx *fasthttp.RequestCtx) {
	if ctx.IsPost() {
		if err := a.postFault(ctx.PostBody()); err != nil {
			a.reply.writeError(ctx, err)
			return
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(a.faults.load().appendJSON(nil))
}

func (a *engineAdmin) postFault(body []byte) error {
	parser := a.parsers.Get()
	defer a.parsers.Put(parser)
	v, err := parser.ParseBytes(body)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadFault, err)
	}
	f, err := faultFromJSON(v)
	if err != nil {
		return err
	}
	return a.faults.set(f)
}
