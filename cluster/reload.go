package cluster

import (
	"errors"
	"fmt"
	"sync"
)

// reloaders are the parts of a replica that re-read their files without a
// restart (the command line calls Reload on SIGHUP): the cluster TLS
// material and the client listener's certificate, registered while the
// replica is built, and whatever its owner adds with OnReload (the API
// keys). Each runs in the order added; one that fails keeps its previous
// state and does not stop the others. Safe for concurrent use.
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

// OnReload adds a part that Reload re-reads, under name: reload must leave
// the part as it was when it fails. Safe for concurrent use.
func (r *Replica) OnReload(name string, reload func() error) { r.reloads.add(name, reload) }

// Reload re-reads every reloadable part of the replica from its files, for
// SIGHUP: the cluster TLS certificate, key and CA, the client listener's
// certificate, and what was added with OnReload. A part whose files do not
// load keeps what it had, and the error names it; the others still change.
// New handshakes use the new material; open connections keep theirs.
func (r *Replica) Reload() error {
	done, err := r.reloads.run()
	if len(done) > 0 {
		r.log.Info("reloaded", "parts", done)
	}
	if err != nil {
		r.log.Error("reload failed; these parts keep their previous state", "err", err)
	}
	return err
}

// SetAPIKeys replaces the API keys clients must present (none turns the
// check off), for an OnReload part.
func (r *Replica) SetAPIKeys(keys []string) { r.proxy.SetAPIKeys(keys) }
