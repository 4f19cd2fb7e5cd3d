package cluster

import (
	"fmt"
	"net"
)

// listeners are the sockets a replica binds at start, so that a port in
// use is refused at once: the API's (--port), the metrics' (--prometheus-port)
// and the profiles' (--debug-addr), the last two nil when off.
type listeners struct {
	api, metrics, debug net.Listener
}

// open binds the API listener, the --prometheus-port one and the
// --debug-addr one, so that a port in use is refused at start.
func (l *listeners) open(cfg Config) error {
	var err error
	if l.api, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	if cfg.MetricsAddr != "" {
		if l.metrics, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("--prometheus-port: %w", err)
		}
	}
	if cfg.DebugAddr != "" {
		if l.debug, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
	}
	return nil
}

// debugAddr is where the profiles are served, "" when --debug-addr is off.
func (l *listeners) debugAddr() string {
	if l.debug == nil {
		return ""
	}
	return l.debug.Addr().String()
}

// close closes those bound, for a replica that never served on them.
func (l *listeners) close() []error {
	var errs []error
	for _, ln := range []net.Listener{l.api, l.metrics, l.debug} {
		if ln != nil {
			errs = append(errs, ln.Close())
		}
	}
	return errs
}
