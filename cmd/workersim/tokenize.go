package main

import (
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

// pathTokenize is vLLM's POST /tokenize: a router that routes on the engine's KV events asks it
// for a prompt's token IDs, chat template applied.
const pathTokenize = "/tokenize"

// handleTokenize answers {"prompt": ...} or {"messages": [...], "tools": [...]} with the token IDs the engine
// would compute: {"count", "max_model_len", "tokens"}, as vLLM does. The IDs are the simulated
// tokenizer's (sim.Config.Tokens) over the text the engine renders, so block i of them is the
// block whose KV events name those tokens.
func (s *server) handleTokenize(ctx *fasthttp.RequestCtx) {
	text, err := s.tokenizeText(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, err)
		return
	}
	tokens := s.cfg.engine.Tokens(nil, text)
	b := append([]byte(`{"count":`), strconv.Itoa(len(tokens))...)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.cfg.engine.KVCapacityTokens), 10)
	b = append(b, `,"tokens":[`...)
	for i, t := range tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	b = append(b, "]}"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *server) tokenizeText(body []byte) ([]byte, error) {
	parser := s.parsers.Get()
	defer s.parsers.Put(parser)
	v, err := parseObject(parser, body)
	if err != nil {
		return nil, err
	}
	var text []byte
	switch {
	case v.Exists("messages"):
		text, err = sim.AppendChatRequestJSON(nil, v) // vLLM's /tokenize renders the tools too
	case v.Exists("prompt"):
		text, err = sim.AppendPromptJSON(nil, v.Get("prompt"))
	default:
		return nil, fmt.Errorf("%w: prompt or messages is required", errBadRequest)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return text, nil
}
