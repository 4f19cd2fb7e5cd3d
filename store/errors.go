package store

import (
	"errors"
	"fmt"
)

// Conditions a caller branches on. Errors returned by this package wrap one
// of them; match with errors.Is.
var (
	// ErrInvalid marks a command or request that is malformed or fails
	// validation. The wrapping *FieldError names the offending field.
	ErrInvalid = errors.New("invalid command")
	// ErrUnknownWorker marks a command that names a worker id the registry
	// does not hold (never added, or removed).
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrConflict marks an AddWorker for a URL that is already registered
	// with a different role, model, bootstrap port or labels, and (as a
	// StaleError) a compare-and-set that another write came before.
	ErrConflict = errors.New("conflicting worker registration")
	// ErrUnsupportedVersion marks a command or snapshot written by a newer
	// version of this program than the one reading it.
	ErrUnsupportedVersion = errors.New("unsupported encoding version")
	// ErrConfigMismatch marks two routing configurations that differ; the
	// wrapping *ConfigMismatchError names the first differing field.
	ErrConfigMismatch = errors.New("routing config mismatch")
	// ErrDataDirInUse marks a data directory whose Raft log is held open by
	// another process (or another OpenStores in this one).
	ErrDataDirInUse = errors.New("data directory in use")
)

// StaleError is a compare-and-set refused because what it would replace
// changed since the caller read it: another write came first.
type StaleError struct {
	What       string // what changed, "the routing config"
	Have, Want uint64 // the index it is at, and the one the write named
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s changed since it was read: another write set it at index %d, and this one names index %d; "+
		"read it again, make the change to what it is now and send that", e.What, e.Have, e.Want)
}

// Unwrap makes every StaleError match ErrConflict.
func (e *StaleError) Unwrap() error { return ErrConflict }

// FieldError is a validation failure of one field. Field uses the JSON name
// of the field as the admin API and the commands spell it ("url", "role",
// "config.block_size"), so a 400 response can name it.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Problem)
}

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ConfigMismatchError reports the first field in which two routing
// configurations differ, with both values as text.
type ConfigMismatchError struct {
	Field  string
	Local  string
	Remote string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("routing config mismatch: %s is %s here but %s there", e.Field, e.Local, e.Remote)
}

// Unwrap makes every ConfigMismatchError match ErrConfigMismatch.
func (e *ConfigMismatchError) Unwrap() error { return ErrConfigMismatch }
