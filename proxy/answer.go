package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/admit"
)

// answer is a worker's whole answer, read before any byte of it reached the
// client, so that a failure while reading it is still worth another
// attempt. A kept answer (a retryable status while other attempts are
// made, or a prefill's answer) holds its own copy; a final answer is read
// straight into the client's response.
type answer struct {
	worker     affinity.WorkerID
	status     int
	header     fasthttp.ResponseHeader // a kept answer's
	body       []byte                  // a kept answer's
	retryable  bool                    // a 408, 429 or 5xx kept while other attempts are made
	inResponse bool                    // already in the client's response
}

// keepAnswer reads a's whole answer into an answer of its own, and ends a.
func (s *sender) keepAnswer(a *attempt) (*answer, error) {
	if err := a.readWhole(s.maxResponse); err != nil {
		o, e := a.failure(err)
		a.end(o, false)
		return nil, e
	}
	ans := &answer{worker: a.m.ID, status: a.status(), body: a.resp.SwapBody(nil)} // the body's bytes change hands
	a.resp.Header.CopyTo(&ans.header)
	a.end(outcomeOf(ans.status), a.reusable())
	return ans, nil
}

// finalAnswer reads a's whole answer and makes it the client's response,
// and ends a.
func (s *sender) finalAnswer(a *attempt) (*answer, error) {
	if err := a.readWhole(s.maxResponse); err != nil {
		o, e := a.failure(err)
		a.end(o, false)
		return nil, e
	}
	status := a.status()
	resp := &a.x.ctx.Response
	copyResponseHeader(a.x, &a.resp.Header)
	resp.SetStatusCode(status)
	swapBodies(resp, a.resp)
	a.end(outcomeOf(status), a.reusable())
	return a.x.delivered(a.m.ID, status), nil
}

// emptyAnswer makes a's answer, whose body was read and found empty, the
// client's response, and ends a.
func (s *sender) emptyAnswer(a *attempt) *answer {
	status := a.status()
	resp := &a.x.ctx.Response
	copyResponseHeader(a.x, &a.resp.Header)
	resp.SetStatusCode(status)
	resp.ResetBody()
	a.end(outcomeOf(status), a.reusable())
	return a.x.delivered(a.m.ID, status)
}

// delivered is the answer of worker w already in x's response.
func (x *exchange) delivered(w affinity.WorkerID, status int) *answer {
	x.final = answer{worker: w, status: status, inResponse: true}
	return &x.final
}

// swapBodies moves src's body to dst without copying it, and dst's buffer
// to src, so both keep pooled buffers.
func swapBodies(dst, src *fasthttp.Response) {
	body := src.SwapBody(nil)
	src.SwapBody(dst.SwapBody(body))
}

// deliver makes ans the client's response.
func (ans *answer) deliver(x *exchange) {
	if ans.inResponse {
		return
	}
	resp := &x.ctx.Response
	copyResponseHeader(x, &ans.header)
	resp.SetStatusCode(ans.status)
	resp.SetBody(ans.body)
}

// copyResponseHeader passes a worker's headers through to the client's
// response, less hop-by-hop ones, the length (fasthttp frames the body it
// writes) and the worker's CORS headers, with the request's x-request-id
// and the router's own CORS answer: the router owns CORS, and a worker's
// Access-Control-Allow-Origin: * (vLLM's default) must not reach an origin
// --cors-allowed-origins refused.
func copyResponseHeader(x *exchange, src *fasthttp.ResponseHeader) {
	dst := &x.ctx.Response
	src.CopyTo(&dst.Header)
	delWorkerHeaders(&dst.Header)
	dst.Header.Del("Content-Length")
	dst.Header.SetBytesV("x-request-id", x.id)
	admit.SetQueueTime(&dst.Header, x.ticket)
	x.path.cors.apply(x.ctx, false)
}

// delWorkerHeaders deletes what of a worker's answer is not for the client:
// the hop-by-hop headers, those its Connection header names (RFC 9110
// 7.6.1), and its Access-Control-* headers. It looks at the headers once,
// and again only when there is something to delete.
func delWorkerHeaders(h *fasthttp.ResponseHeader) {
	var present [16]bool
	found, cors := false, false
	for k := range h.All() {
		if i := hopIndex(k); i >= 0 {
			present[i], found = true, true
		}
		cors = cors || isCORSHeader(k)
	}
	if !found && !cors {
		return
	}
	if present[0] { // Connection
		eachConnectionOption(h.Peek("Connection"), func(name []byte) { h.Del(string(name)) })
	}
	if cors {
		var names []string
		for k := range h.All() {
			if isCORSHeader(k) {
				names = append(names, string(k))
			}
		}
		for _, name := range names {
			h.Del(name)
		}
	}
	delPresent(h.Del, present)
}

// isCORSHeader reports whether key, as fasthttp writes header names, is one
// of the Access-Control-* response headers.
func isCORSHeader(key []byte) bool {
	const prefix = "Access-Control-"
	return len(key) > len(prefix) && bytes.EqualFold(key[:len(prefix)], []byte(prefix))
}

func delPresent(del func(string), present [16]bool) {
	for i, name := range hopHeaders {
		if present[i] {
			del(name)
		}
	}
}

// hopIndex is the index in hopHeaders of key, as fasthttp writes header
// names, or -1.
func hopIndex(key []byte) int {
	for i, name := range hopHeaders {
		if len(key) == len(name) && string(key) == name {
			return i
		}
	}
	return -1
}
