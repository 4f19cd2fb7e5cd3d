package main

import (
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// handleFault serves GET /admin/fault (the current fault) and POST /admin/fault (set one, with
// the JSON object {"mode","rate","factor","delay_ms"}; mode "none" clears).
func (s *server) handleFault(ctx *fasthttp.RequestCtx) {
	if ctx.IsPost() {
		if err := s.postFault(ctx.PostBody()); err != nil {
			s.writeError(ctx, err)
			return
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(s.fault.Load().appendJSON(nil))
}

func (s *server) postFault(body []byte) error {
	parser := s.parsers.Get()
	defer s.parsers.Put(parser)
	v, err := parser.ParseBytes(body)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadFault, err)
	}
	f, err := faultFromJSON(v)
	if err != nil {
		return err
	}
	return s.setFault(f)
}

// setFault makes f the current fault: it sets the engine's slowdown and wedge, and arms the exit
// of a crash (immediate without a delay).
func (s *server) setFault(f fault) error {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.crash != nil {
		s.crash.Stop()
		s.crash = nil
	}
	if err := s.driver.SetSlowdown(f.slowdown()); err != nil {
		return fmt.Errorf("%w: %w", errBadFault, err)
	}
	s.driver.SetWedged(f.Mode == faultWedge)
	s.fault.Store(&f)
	if f.Mode != faultCrash {
		return nil
	}
	if f.DelayMs == 0 {
		s.exit(crashExitCode)
		return nil
	}
	s.crash = time.AfterFunc(time.Duration(f.DelayMs)*time.Millisecond, func() { s.exit(crashExitCode) })
	return nil
}
