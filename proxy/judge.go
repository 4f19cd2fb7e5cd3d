package proxy

import (
	"bytes"
	"strconv"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// Decider decides where a leg goes and hears the engine's answer to it, so
// that every decision is judged against what the engine had cached: the
// replica core (core) in a cluster. Without one the router decides
// alone and nothing is judged.
type Decider interface {
	Decide(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error)
	Answered(d core.Decided, u core.Usage)
}

// route decides the leg's next attempt over cand, keeping what was known
// for the answer.
func (l *leg) route(cand *affinity.Pool) (affinity.Decision, *affinity.Guard, error) {
	if l.decider == nil {
		return l.router.Route(l.req, cand)
	}
	d, g, err := l.decider.Decide(l.router, l.req, cand)
	l.decided = d
	return d.Decision, g, err
}

// judge hands the engine's usage in a 2xx answer of the leg's latest
// decision to the decider.
func (l *leg) judge(status int, u core.Usage) {
	if l.decider != nil && status/100 == 2 && !l.pinned {
		l.decider.Answered(l.decided, u)
	}
}

// usageOf reads the prompt's tokens and how many were cached from an
// answer or a stream's last events, without parsing them: OpenAI's
// usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens
// (input_tokens and input_tokens_details for /v1/responses), SGLang's
// meta_info.prompt_tokens and meta_info.cached_tokens, Anthropic's
// usage.input_tokens and cache_read_input_tokens. The last occurrence
// counts.
func usageOf(body []byte) core.Usage {
	var u core.Usage
	prompt, ok := lastNumber(body, `"prompt_tokens":`)
	if !ok {
		if prompt, ok = lastNumber(body, `"input_tokens":`); !ok {
			return u
		}
		if read, ok := lastNumber(body, `"cache_read_input_tokens":`); ok {
			return anthropicUsage(body, prompt, read)
		}
	}
	u.PromptTokens = prompt
	u.CachedTokens, u.HasCached = lastNumber(body, `"cached_tokens":`)
	return u
}

// anthropicUsage is the usage of an answer in Anthropic's accounting, where
// input_tokens are only the prompt's tokens neither read from the cache
// nor written to it: the prompt is the three together, and what was read
// is what was cached. (vLLM's Messages API says input_tokens for the whole
// prompt and no cache_read_input_tokens: usageOf reads it as the
// Responses API's, and finds nothing cached to judge.)
func anthropicUsage(body []byte, input, read int) core.Usage {
	written, _ := lastNumber(body, `"cache_creation_input_tokens":`)
	return core.Usage{PromptTokens: input + read + written, CachedTokens: read, HasCached: true}
}

// lastIndex is bytes.LastIndex by forward searches for the key less its
// first byte (a quote, in every key here, and the commonest byte of JSON,
// which would stop bytes.Index's scan at every string): bytes.Index then
// skips from one candidate to the next with vector instructions, where
// LastIndex hashes every byte of the body, and an answer names each key
// once or not at all.
func lastIndex(s, key []byte) int {
	if len(key) < 2 {
		return bytes.LastIndex(s, key)
	}
	last := -1
	for from := 1; from <= len(s); {
		i := bytes.Index(s[from:], key[1:])
		if i < 0 {
			return last
		}
		if at := from + i - 1; s[at] == key[0] {
			last = at
		}
		from += i + 1
	}
	return last
}

// mentionsUsage says whether relayed bytes may carry a usage object.
func mentionsUsage(b []byte) bool { return bytes.Contains(b, []byte(`"cached_tokens":`)) }

// lastNumber reads the integer after the last occurrence of key in body.
func lastNumber(body []byte, key string) (int, bool) {
	i := lastIndex(body, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(body[i+len(key):], " ")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(string(rest[:end]))
	return n, err == nil
}
