// Package sim models one LLM inference engine (a vLLM-like worker) as a pure state machine over
// virtual time, so that the same physics drives the real-time simulated worker (cmd/workersim) and
// the discrete-event fleet simulator (cmd/fleetsim) running hundreds of engines.
//
// An [Engine] keeps a prefix cache of KV blocks hashed like vLLM's (a chain of hashes over blocks of
// [Config.BlockTokens] tokens, tokens approximated as [Config.BytesPerToken] bytes of text), evicts
// unreferenced blocks least recently used first, admits requests first come first served while a
// sequence slot is free and their KV fits, and runs continuous batching: every step decodes one
// token for each running sequence and prefills chunks of the admitted prompts up to
// [Config.MaxBatchedTokens]. A step lasts the prefill cost of its uncached tokens plus a decode
// cost that grows with KV usage, so what routing controls (which prompts find their prefix cached,
// how many requests queue on one engine) shows up as time.
//
// Nothing here starts goroutines, opens sockets or reads the wall clock: the caller owns time.
// It submits requests and cancellations at a virtual instant, asks [Engine.NextEventAt] when the
// engine next has something to report, and calls [Engine.Advance] to collect the events due.
// An Engine is not safe for concurrent use; one goroutine (or one simulation loop) owns it.
//
// The rendering helpers ([RenderChat], [AppendChatJSON], [AppendPromptJSON]) turn an OpenAI request
// into the routing text exactly as the router renders it, so a simulated worker caches the same
// prefixes the router reasons about.
package sim
