package zmtp

import (
	"testing"

	"go.uber.org/goleak"
)

// go-zeromq's PUB, the independent implementation these tests talk to,
// never stops its writer goroutine on Close: the peer's goroutine, not
// ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
