package cluster

import (
	"errors"
	"fmt"
	"sync"
)

// reloaders are the parts of a replica that re-read their files without a
// restart (the command line calls Reload on SIGHUP): today the cluster TLS
// material; API keys or client certificates join by registering their own
// reload function with add while the replica is built. Each runs in the
// order added; one that fails keeps its previous state and does not stop
// the others. Safe for concurrent use.
type reloaders struct {
	mu   sync.Mutex
	list []namedReload
}

type namedReload struct {
	name   string
	reload func() error
}

// add registers reload under name (used in log lines and errors).
func (rs *reloaders) add(name string, reload func() error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.list = append(rs.list, namedReload{name, reload})
}

// run reloads everything and returns the names reloaded and the failures,
// each wrapped with its name.
func (rs *reloaders) run() (done []string, err error) {
	rs.mu.Lock()
	list := append([]namedReload(nil), rs.list...)
	rs.mu.Unlock()
	var errs []error
	for _, r := range list {
		if e := r.reload(); e != nil {
			errs = append(errs, fmt.Errorf("reloading %s: %w", r.name, e))
			continue
		}
		done = append(done, r.name)
	}
	return done, errors.Join(errs...)
}

// Reload re-reads every reloadable part of the replica from its files
// (today the cluster TLS certificate, key and CA), for SIGHUP. A part whose
// files do not load keeps what it had, and the error names it. New
// handshakes use the new material; open connections keep theirs.
func (r *Replica) Reload() error {
	done, err := r.reloads.run()
	if len(done) > 0 {
		r.log.Info("reloaded", "parts", done)
	}
	if err != nil {
		r.log.Error("reload failed; keeping the previous state of these parts", "err", err)
	}
	return err
}
