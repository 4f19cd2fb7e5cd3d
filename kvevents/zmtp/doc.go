// Package zmtp speaks just enough of ZMTP 3 (the ZeroMQ wire protocol, RFC
// 23, NULL security) to hear an engine's KV events: a SUB socket that dials
// a publisher or accepts publishers that dial it, and a DEALER that asks a
// ROUTER for a replay.
//
// It exists because what an engine's event port sends is untrusted input:
// the general-purpose ZMQ library the router used before allocates every
// frame at the size its header announces, so 73 bytes (a greeting and a
// header announcing 2^40 bytes) ran a replica out of memory, and its accept
// loop shakes hands with one peer at a time, with no deadline, so one silent
// connection would stop a bound socket from hearing anyone. Here every read
// is bounded before anything is allocated for it (Limits): a message's
// frames, their count and their total size; a frame's body is read as it
// arrives, so memory follows the bytes a peer really sent, never what it
// announced; a handshake has a deadline; and a peer that breaks a bound gets
// its connection closed and an error that names the bound, never a crash.
//
// Interoperability: the greeting announces version 3.0, which ZMTP 3.1 peers
// (libzmq, vLLM's publisher) and 3.0 ones (go-zeromq) both speak;
// subscriptions go as 3.0 messages (0x01 + topic), which both accept; a
// PING is answered with a PONG. Anything older than ZMTP 3 or another
// security mechanism than NULL is refused.
package zmtp
