package edge

import (
	"math/bits"
	"sync"
)

// Request bodies of a known length are read into buffers kept for reuse,
// one pool per power-of-two size from 4 KiB to 1 MiB: a fresh buffer per
// request costs an allocation the size of the body, zeroed before it is
// overwritten, and the collections that much garbage brings (at 64 KiB
// bodies, a tenth of the router's CPU). A buffer goes back when the
// request was served (the proxy's Handler), or, for a stream that may
// resume, whose continuation is written from the body, when the stream
// ends (the exchange's finish); never while anything may still read it:
// a router with disaggregated workers, whose concurrent prefill may
// outlive the exchange with the client's body, reads into fresh buffers.
const (
	minPooledBody   = 12 // 4 KiB: smaller bodies take a 4 KiB buffer
	pooledBodySizes = 9  // up to 1 MiB; larger bodies are allocated
)

var bodyBuffers [pooledBodySizes]sync.Pool

// bodyClass is the pool of a body of n bytes, or -1 past the largest.
func bodyClass(n int) int {
	c := max(bits.Len(uint(n-1)), minPooledBody) - minPooledBody
	if c >= pooledBodySizes {
		return -1
	}
	return c
}

// TakeBody returns a buffer of n bytes, of unspecified content, and its
// handle for GiveBody (nil when it is not pooled).
func TakeBody(n int) ([]byte, *[]byte) {
	c := bodyClass(n)
	if c < 0 {
		return make([]byte, n), nil
	}
	if b, ok := bodyBuffers[c].Get().(*[]byte); ok {
		return (*b)[:n], b
	}
	b := make([]byte, 1<<(c+minPooledBody))
	return b[:n], &b
}

// GiveBody returns a buffer of TakeBody; nothing may read it after.
func GiveBody(b *[]byte) {
	if b != nil {
		bodyBuffers[bodyClass(cap(*b))].Put(b)
	}
}
