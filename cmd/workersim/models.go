package main

import (
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"
)

// modelCatalog is the models the worker serves: its --model names and the LoRA adapters loaded
// now (lora.go), as /v1/models lists them and as requests name them.
type modelCatalog struct {
	cfg      serverConfig
	created  int64       // unix seconds at start, reported as the models' created time
	adapters *adapterSet // the LoRA adapters served now
	reply    *replier
}

// handleModels lists the models served, as vLLM does: each base model, then each LoRA adapter
// with its path as its root and the first model as its parent.
func (m *modelCatalog) handleModels(ctx *fasthttp.RequestCtx) {
	b := []byte(`{"object":"list","data":[`)
	for i, name := range m.cfg.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.appendModel(b, name, name, "")
	}
	for _, a := range m.adapters.list() {
		b = m.appendModel(append(b, ','), a.Name, a.Path, m.cfg.models[0])
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, "]}"...))
}

// appendModel appends one model of /v1/models; parent "" is null (a base model).
func (m *modelCatalog) appendModel(b []byte, id, root, parent string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, m.created, 10)
	b = append(b, `,"owned_by":"workersim","root":`...)
	b = appendJSONString(b, root)
	b = append(b, `,"parent":`...)
	if parent == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, parent)
	}
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(m.cfg.engine.KVCapacityTokens), 10)
	return append(b, '}')
}

// resolveModel checks that the worker serves model and names the default (its first model) when
// the request names none.
func (m *modelCatalog) resolveModel(model string) (string, error) {
	switch {
	case model == "":
		return m.cfg.models[0], nil
	case !m.cfg.serves(model) && !m.adapters.has(model):
		return "", fmt.Errorf("%w: the model %q does not exist", errModelNotFound, model)
	}
	return model, nil
}
