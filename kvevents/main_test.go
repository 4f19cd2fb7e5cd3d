package kvevents

import (
	"testing"

	"go.uber.org/goleak"
)

// The ZMQ library's PUB writer can miss the signal of a Close that comes
// before it first waits, and then waits forever: a goroutine of the
// publisher's side (the simulated engine), never of the router's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
