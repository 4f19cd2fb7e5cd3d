// Package edge is what a client connection may cost the router before any
// request of it is routed: the listener that counts connections against
// --max-connections and keeps accepting when descriptors run out
// (listener.go), the lingering close that lets a refused client read its
// answer, the watch on a connection's first request head for bare LFs
// (heads.go), and the pools request bodies are read into (bodypool.go).
//
// It knows nothing of HTTP routes or workers; the proxy wires it to its
// server, and asks a connection, through Of, whether it is over the limit
// or should linger.
package edge
