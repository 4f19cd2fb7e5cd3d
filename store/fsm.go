package store

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// FSM is the registry state machine behind Raft.
//
// Raft calls Apply, Snapshot and Restore from its single FSM goroutine, never
// two at once; FSMSnapshot.Persist runs on another goroutine, concurrently
// with Apply, and is safe because it only reads an immutable Registry. The
// writers also take a mutex, so tests and tools may drive an FSM directly.
//
// Readers never lock: View is one atomic load. Watch adds change
// notification without registration: it returns the current registry and a
// channel that is closed when a newer one is published. Notifications
// coalesce (a slow reader sees only the latest registry) and never block
// Apply. A reader loops:
//
//	for {
//		reg, changed := fsm.Watch()
//		use(reg)
//		select {
//		case <-changed:
//		case <-stop:
//			return
//		}
//	}
type FSM struct {
	writeMu sync.Mutex
	current atomic.Pointer[published]
	// halted is why the FSM stopped applying (halt.go), nil while it
	// applies; restoreErr why the last Restore failed.
	halted, restoreErr atomic.Pointer[error]
}

// published pairs a registry with the channel closed when it is superseded.
type published struct {
	reg     *Registry
	changed chan struct{}
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM holding the empty registry (no workers, no routing
// config, index 0, next id 1).
func NewFSM() *FSM {
	f := &FSM{}
	f.current.Store(&published{reg: emptyRegistry(), changed: make(chan struct{})})
	return f
}

// View returns the current registry. Never blocks; safe from any goroutine.
func (f *FSM) View() *Registry { return f.current.Load().reg }

// Watch returns the current registry and a channel closed as soon as a newer
// registry is published. Safe from any goroutine.
func (f *FSM) Watch() (*Registry, <-chan struct{}) {
	p := f.current.Load()
	return p.reg, p.changed
}

// publish makes reg current and wakes the watchers of the previous one.
// Callers hold writeMu.
func (f *FSM) publish(reg *Registry) {
	old := f.current.Swap(&published{reg: reg, changed: make(chan struct{})})
	close(old.changed)
}

// Apply applies one committed log entry and returns a Result. Entries that
// are not commands are ignored (nil result); a command that fails to decode
// or is refused by the registry leaves the workers unchanged and reports why
// in Result.Err, but still advances the registry's Index. A command of a
// version this build does not read halts the FSM (halt.go): it and every
// entry after it are left for a build that reads them.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if err := f.Halted(); err != nil {
		return Result{Index: l.Index, Err: err}
	}
	reg := f.View()
	res := Result{}
	cmd, err := Decode(l.Data)
	if errors.Is(err, ErrUnsupportedVersion) {
		return Result{Index: l.Index, Err: f.halt(l.Index, err)}
	}
	if err != nil {
		res.Err = err
	} else {
		reg, res = applyCommand(reg, cmd, l.Index)
	}
	res.Index = l.Index
	f.publish(reg.atIndex(l.Index))
	return res
}
