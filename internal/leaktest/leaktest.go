// Package leaktest holds the goroutine-leak check every package's tests run:
// goleak, less the process-wide goroutines that fasthttp starts once and
// never stops (they are not leaks of ours).
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// fasthttpGlobals are goroutines fasthttp keeps for the life of the process,
// or lets sleep out an interval after a server's Shutdown.
var fasthttpGlobals = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.init.func1"),
}

// Main runs the package's tests and fails the run if any goroutine of ours
// outlives them. Use it as: func TestMain(m *testing.M) { leaktest.Main(m) }
func Main(m *testing.M) { goleak.VerifyTestMain(m, fasthttpGlobals...) }
