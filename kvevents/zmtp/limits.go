package zmtp

import (
	"errors"
	"fmt"
	"time"
)

// Limits bound what one peer may make this side read and hold. Zero fields
// take the defaults in their comments.
type Limits struct {
	// MaxMessageBytes bounds the frames of one message together (default
	// 16 MiB: a vLLM batch is rarely over a megabyte).
	MaxMessageBytes int
	// MaxFrames bounds the frames of one message (default 8: an event
	// message has three, a replay answer three).
	MaxFrames int
	// HandshakeTimeout bounds the greeting and READY exchange (default 5 s).
	HandshakeTimeout time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxMessageBytes  = 16 << 20
	DefaultMaxFrames        = 8
	DefaultHandshakeTimeout = 5 * time.Second
	// maxCommandBytes bounds a command's body: READY carries a socket type
	// and an identity of at most 255 bytes, PING a context of at most 16.
	maxCommandBytes = 4096
)

func (l Limits) withDefaults() Limits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.MaxFrames <= 0 {
		l.MaxFrames = DefaultMaxFrames
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	return l
}

// ErrProtocol wraps every refusal of what a peer sent: a bad greeting or
// handshake, a malformed frame, a bound broken. The connection is closed.
var ErrProtocol = errors.New("zmtp: protocol violation")

// ErrTooLarge says a peer broke one of the Limits; the error that wraps it
// wraps ErrProtocol too.
var ErrTooLarge = errors.New("over a bound")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %w: "+format, append([]any{ErrProtocol, ErrTooLarge}, args...)...)
}
