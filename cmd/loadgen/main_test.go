package main

import (
	"testing"

	"go.uber.org/goleak"
)

// fasthttp (the fake server's library) starts one process-wide goroutine that refreshes its Date
// header; it is not ours to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}
