package main

import (
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// pathTokenize is vLLM's POST /tokenize: a router that routes on the engine's KV events asks it
// for a prompt's token IDs, chat template applied.
const pathTokenize = "/tokenize"

// tokenizer serves the endpoints that render and tokenize a prompt without generating: vLLM's
// /tokenize and the Messages API's count_tokens (messages.go).
type tokenizer struct {
	cfg     serverConfig
	models  *modelCatalog
	reply   *replier
	parsers *fastjson.ParserPool
}

// handleTokenize answers {"prompt": ...} or {"messages": [...], "tools": [...]} with the token IDs the engine
// would compute: {"count", "max_model_len", "tokens"}, as vLLM does. The IDs are the simulated
// tokenizer's (sim.Config.Tokens) over the text the engine renders, so block i of them is the
// block whose KV events name those tokens.
func (tk *tokenizer) handleTokenize(ctx *fasthttp.RequestCtx) {
	text, err := tk.tokenizeText(ctx.PostBody())
	if err != nil {
		tk.reply.writeError(ctx, err)
		return
	}
	tokens := tk.cfg.engine.Tokens(nil, text)
	b := append([]byte(`{"count":`), strconv.Itoa(len(tokens))...)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(tk.cfg.engine.KVCapacityTokens), 10)
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

func (tk *tokenizer) tokenizeText(body []byte) ([]byte, error) {
	parser := tk.parsers.Get()
	defer tk.parsers.Put(parser)
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
