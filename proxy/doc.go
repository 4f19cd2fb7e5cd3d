// Package proxy is the request path of a router replica: the fasthttp front
// end of the OpenAI-compatible API and Anthropic's Messages API (what it
// reads of a body and how it words its own errors are package wire's), worker
// selection through package affinity, forwarding over pooled upstream
// connections, SSE relayed event by event, retries before the first byte,
// and the in-flight guards that keep load counts honest on every path
// (success, error, retry, client disconnect).
//
// Every request of the inference API is an exchange (exchange.go) from the
// moment the door (door.go) decides on it, and ends in one function,
// exchange.finish, whichever way it went: refused at the door or later,
// answered whole, streamed (the relay reports its end), or cut. The metrics,
// the request log, the trace and the admission slot are settled there, once.
//
// An exchange is served by collaborators of one concern each, which New
// builds into the request path it holds (path.go): the sender of attempts
// and retries, the routing of legs, the relay's streaming, the recorder of
// metrics, log and trace. The features that join an inference exchange (P/D,
// the stored responses' owners, the prompt's tokens) are hooks asked in
// order for small capabilities (hooks.go); the Proxy itself keeps the
// server, its listeners, the door and its exported controls. The client
// edge (package edge), the look at a socket (package peek) and the wire are
// leaf packages that import nothing of it.
//
// The proxy knows workers through a Fleet view that the cluster layer
// refreshes when the registry or a worker's health changes; the request path
// only loads that immutable view.
package proxy
