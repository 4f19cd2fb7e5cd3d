package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// answer is a worker's whole answer, read before any byte of it reached the
// client, so that a failure while reading it is still worth another
// attempt. A kept answer (a retryable status while other attempts are
// made, or a prefill's answer) holds its own copy; a final answer is read
// straight into the client's response.
type answer struct {
	status     int
	header     fasthttp.ResponseHeader // a kept answer's
	body       []byte                  // a kept answer's
	retryable  bool                    // a 408, 429 or 5xx kept while other attempts are made
	inResponse bool                    // already in the client's response
}

// keepAnswer reads a's whole answer into an answer of its own, and ends a.
func (p *Proxy) keepAnswer(a *attempt) (*answer, error) {
	var body bytes.Buffer
	if err := a.readBody(&body, p.cfg.MaxResponseSize); err != nil {
		o, e := a.failure(err)
		a.end(o, false)
		return nil, e
	}
	ans := &answer{status: a.status(), body: body.Bytes()}
	a.resp.Header.CopyTo(&ans.header)
	a.end(outcomeOf(ans.status), a.reusable())
	return ans, nil
}

// finalAnswer reads a's whole answer into the client's response, and ends a.
func (p *Proxy) finalAnswer(a *attempt) (*answer, error) {
	resp := &a.x.ctx.Response
	resp.ResetBody()
	if err := a.readBody(resp.BodyWriter(), p.cfg.MaxResponseSize); err != nil {
		resp.ResetBody()
		o, e := a.failure(err)
		a.end(o, false)
		return nil, e
	}
	status := a.status()
	copyResponseHeader(resp, &a.resp.Header)
	resp.SetStatusCode(status)
	a.end(outcomeOf(status), a.reusable())
	return &answer{status: status, inResponse: true}, nil
}

// deliver makes ans the client's response.
func (ans *answer) deliver(x *exchange) {
	if ans.inResponse {
		return
	}
	resp := &x.ctx.Response
	copyResponseHeader(resp, &ans.header)
	resp.SetStatusCode(ans.status)
	resp.SetBody(ans.body)
}

// copyResponseHeader passes a worker's headers through to the client's
// response, less hop-by-hop ones and the length (fasthttp frames the body
// it writes), keeping the response's x-request-id.
func copyResponseHeader(dst *fasthttp.Response, src *fasthttp.ResponseHeader) {
	id := append([]byte(nil), dst.Header.Peek("x-request-id")...)
	src.CopyTo(&dst.Header)
	for _, h := range hopHeaders {
		dst.Header.Del(h)
	}
	dst.Header.Del("Content-Length")
	dst.Header.SetBytesV("x-request-id", id)
}
