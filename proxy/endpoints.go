package proxy

// endpoint is one inference API the router routes by prefix: where it is,
// which fields of its body make the routing text (read by bodyReader), and
// whether it goes through prefill/decode disaggregation when that is on
// (the others go whole to the decode workers, which can serve a request
// alone).
type endpoint struct {
	path       string
	kind       endpointKind
	textField  string // named when the body lacks it
	pd         bool
	needsModel bool // without a model, a request goes to any worker
	// counts: the engine counts the prompt's tokens and generates nothing
	// (Anthropic's count_tokens), see planCountTokens.
	counts bool
	id     int // position in endpoints: per-route metrics are arrays
}

// endpointKind says how a body's routing text is read.
type endpointKind int

const (
	kindNone        endpointKind = iota // forwarded whole, no routing text
	kindCompletions                     // prompt
	kindChat                            // tools, then messages with their parts and tool calls (chattext.go)
	kindEmbeddings                      // input, as a prompt
	kindRerank                          // query, then documents
	kindResponses                       // instructions, then input (a string or message items)
	kindGenerate                        // text or input_ids, as a prompt
	kindMessages                        // Anthropic's: tools, system, then messages and their blocks
)

// The endpoints, vllm-router's set: OpenAI's, vLLM's rerank, SGLang's
// native /generate, and Anthropic's Messages API.
var (
	completions     = &endpoint{path: "/v1/completions", kind: kindCompletions, textField: "prompt", pd: true, needsModel: true}
	chatCompletions = &endpoint{path: "/v1/chat/completions", kind: kindChat, textField: "messages", pd: true, needsModel: true}
	embeddings      = &endpoint{path: "/v1/embeddings", kind: kindEmbeddings, textField: "input"}
	rerank          = &endpoint{path: "/v1/rerank", kind: kindRerank, textField: "query"}
	rerankBare      = &endpoint{path: "/rerank", kind: kindRerank, textField: "query"}
	responses       = &endpoint{path: "/v1/responses", kind: kindResponses, textField: "input"}
	generate        = &endpoint{path: "/generate", kind: kindGenerate, textField: "text or input_ids"}
	// Anthropic's Messages API, as vLLM serves it (kv_transfer_params
	// included, so it disaggregates as chat does).
	messages            = &endpoint{path: "/v1/messages", kind: kindMessages, textField: "messages", pd: true, needsModel: true}
	messagesCountTokens = &endpoint{path: "/v1/messages/count_tokens", kind: kindMessages, textField: "messages", needsModel: true,
		counts: true}

	// The endpoints forwarded whole, without routing text: named for the
	// metrics.
	storedResponses = &endpoint{path: "/v1/responses/{id}"}
	workerInfo      = &endpoint{path: "/get_model_info|/get_server_info|/health_generate"}

	endpoints = []*endpoint{completions, chatCompletions, embeddings, rerank, rerankBare, responses, generate,
		messages, messagesCountTokens, storedResponses, workerInfo}
)

func init() {
	for i, ep := range endpoints {
		ep.id = i
	}
}

// endpointAt returns the routed endpoint served at path, or nil.
func endpointAt(path []byte) *endpoint {
	for _, ep := range endpoints {
		if ep.kind != kindNone && string(path) == ep.path {
			return ep
		}
	}
	return nil
}
