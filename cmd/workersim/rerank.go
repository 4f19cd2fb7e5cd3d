package main

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// handleRerank serves POST /rerank, /v1/rerank and /v2/rerank in the Jina/Cohere shape vLLM
// serves for a cross-encoder: each (query, document) pair is one engine request whose prompt is
// the query, a newline and the document, so the pairs of one query share its cached blocks.
func (api *inferenceAPI) handleRerank(ctx *fasthttp.RequestCtx) {
	api.jobs.serveJob(ctx, api.rerankJob)
}

// rerankRequest is what the worker needs from a rerank request.
type rerankRequest struct {
	model      string
	query      string
	documents  []string
	topN       int  // results kept, best first; 0 keeps all
	returnDocs bool // return_documents, default true
}

func (api *inferenceAPI) rerankJob(parser *fastjson.Parser, body []byte) (job, error) {
	req, err := api.parseRerank(parser, body)
	if err != nil {
		return job{}, err
	}
	inputs := make([]embedInput, len(req.documents))
	for i, doc := range req.documents {
		inputs[i].text = append(append([]byte(req.query), '\n'), doc...)
	}
	r := &rerankRenderer{id: api.ids.next("rerank-"), model: req.model, req: req, dims: api.cfg.embeddingDims}
	return job{subs: prefillOnly(inputs), render: r, pooling: true}, nil
}

func (api *inferenceAPI) parseRerank(p *fastjson.Parser, body []byte) (rerankRequest, error) {
	v, err := parseObject(p, body)
	if err != nil {
		return rerankRequest{}, err
	}
	var req rerankRequest
	if req.model, _, err = optionalString(v, "model"); err != nil {
		return req, err
	}
	if req.model, err = api.models.resolveModel(req.model); err != nil {
		return req, err
	}
	var set bool
	if req.query, set, err = optionalString(v, "query"); err != nil || !set {
		return req, fmt.Errorf("%w: query must be a string", errBadRequest)
	}
	if req.documents, err = readDocuments(v.Get("documents")); err != nil {
		return req, err
	}
	if req.returnDocs, err = optionalBoolDefault(v, "return_documents", true); err != nil {
		return req, err
	}
	req.topN, err = readTopN(v)
	return req, err
}

// readDocuments reads documents: strings, or objects with a "text" string (Jina).
func readDocuments(v *fastjson.Value) ([]string, error) {
	if v == nil || v.Type() != fastjson.TypeArray {
		return nil, fmt.Errorf("%w: documents must be an array", errBadRequest)
	}
	items := v.GetArray()
	docs := make([]string, len(items))
	for i, item := range items {
		if item.Type() == fastjson.TypeObject {
			item = item.Get("text")
		}
		if item == nil || item.Type() != fastjson.TypeString {
			return nil, fmt.Errorf("%w: documents[%d] must be a string or an object with a text string", errBadRequest, i)
		}
		docs[i] = string(item.GetStringBytes())
	}
	return docs, nil
}

func readTopN(v *fastjson.Value) (int, error) {
	f := v.Get("top_n")
	if f == nil || f.Type() == fastjson.TypeNull {
		return 0, nil
	}
	n, err := f.Int()
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: top_n must be a non-negative integer", errBadRequest)
	}
	return n, nil
}

// rerankRenderer renders vLLM's rerank response: results best first, at most top_n.
type rerankRenderer struct {
	id    string
	model string
	req   rerankRequest
	dims  int
}

var _ renderer = (*rerankRenderer)(nil)

type rerankResult struct {
	index int
	score float64
}

// results scores every document against the query and sorts them best first, ties by index.
func (r *rerankRenderer) results() []rerankResult {
	q := embed(embedInput{text: []byte(r.req.query)}, r.dims, 0)
	out := make([]rerankResult, len(r.req.documents))
	for i, doc := range r.req.documents {
		out[i] = rerankResult{index: i, score: relevance(q, embed(embedInput{text: []byte(doc)}, r.dims, 0))}
	}
	slices.SortStableFunc(out, func(a, b rerankResult) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	if r.req.topN > 0 && r.req.topN < len(out) {
		out = out[:r.req.topN]
	}
	return out
}

func (r *rerankRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, r.id)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, r.model)
	dst = appendPromptUsage(dst, final)
	dst = append(dst, `,"results":[`...)
	for i, res := range r.results() {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(res.index), 10)
		if r.req.returnDocs {
			dst = append(dst, `,"document":{"text":`...)
			dst = appendJSONString(dst, r.req.documents[res.index])
			dst = append(dst, '}')
		}
		dst = append(dst, `,"relevance_score":`...)
		dst = strconv.AppendFloat(dst, res.score, 'g', -1, 64)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}
