package store

import (
	"errors"
	"fmt"
)

// A registry written by a newer build: what this build cannot read, it
// neither skips nor guesses at (docs/compatibility.md).
//
// A snapshot of a newer version is refused by Restore, and raft then fails
// to start with that refusal (StartError names it): the data dir is left as
// it is, for the newer build to open again.
//
// A command of a newer version in the log (a replica rolled back on a data
// dir a newer build wrote to, or a leader of a newer build that wrote one
// before the join check could stop it) halts the FSM instead of being
// skipped: it stops applying, keeps the registry it had, and refuses to
// snapshot, so raft never compacts the log past the command. A build that
// reads it replays it, and everything after, when it starts on the same
// data dir: nothing is lost. Before the halt, a command this build could
// not read was applied as refused, and a later snapshot dropped it for good.

// ErrHalted marks an FSM that met a command it cannot read; the wrapping
// error names the command's version and the versions this build reads.
var ErrHalted = errors.New("registry halted")

// halt stops the FSM for good at a command it cannot read, and wakes the
// watchers (the registry is the same) so that they see Halted. writeMu is
// held.
func (f *FSM) halt(index uint64, err error) error {
	halted := fmt.Errorf("%w at log index %d: %w; the log is kept, not compacted, for a build that reads it "+
		"(this one reads command versions 1..%d)", ErrHalted, index, err, CommandVersion)
	if f.halted.CompareAndSwap(nil, &halted) {
		f.publish(f.View())
	}
	return *f.halted.Load()
}

// Halted returns why the FSM stopped applying, nil while it applies.
func (f *FSM) Halted() error {
	if p := f.halted.Load(); p != nil {
		return *p
	}
	return nil
}

// StartError explains raft's refusal to start on this FSM's data dir: when
// the newest snapshot could not be restored (a newer build's), err is
// wrapped with why.
func (f *FSM) StartError(err error) error {
	if p := f.restoreErr.Load(); p != nil && err != nil {
		return fmt.Errorf("%w: %w (the data dir is left as it is)", err, *p)
	}
	return err
}
