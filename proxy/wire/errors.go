package wire

import (
	"errors"
	"fmt"
)

// ErrBadRequest is a request the router cannot read: a body that is not the
// JSON its endpoint takes, a field of the wrong type, a key named twice.
var ErrBadRequest = errors.New("bad request")

// Error is an error whose message the client sees. Its kind is the
// condition the router branches on (errors.Is); the router maps the kind to
// an HTTP status in one place, its own.
type Error struct {
	kind error
	msg  string
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.kind }

// Errorf is an error of kind whose message the client sees.
func Errorf(kind error, format string, args ...any) error {
	return &Error{kind: kind, msg: fmt.Sprintf(format, args...)}
}
