package kvevents

import (
	"testing"

	"go.uber.org/goleak"
)

// The ZMQ library's PUB socket never stops its writer goroutine on Close: a
// goroutine of the publisher's side (the simulated engine), never of the
// router's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
