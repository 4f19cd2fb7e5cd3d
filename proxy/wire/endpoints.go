package wire

// Endpoint is one inference API the router routes by prefix: where it is,
// which fields of its body make the routing text (read by bodyReader), and
// whether it goes through prefill/decode disaggregation when that is on
// (the others go whole to the decode workers, which can serve a request
// alone).
type Endpoint struct {
	Path       string
	Kind       Kind
	TextField  string // named when the body lacks it
	PD         bool
	NeedsModel bool // without a model, a request goes to any worker
	// Counts: the engine counts the prompt's tokens and generates nothing
	// (Anthropic's count_tokens), see planCountTokens.
	Counts bool
	ID     int // position in endpoints: per-route metrics are arrays
}

// Kind says how a body's routing text is read.
type Kind int

const (
	KindNone        Kind = iota // forwarded whole, no routing text
	KindCompletions             // prompt
	KindChat                    // tools, then messages with their parts and tool calls (chattext.go)
	KindEmbeddings              // input, as a prompt
	KindRerank                  // query, then documents
	KindResponses               // instructions, then input (a string or message items)
	KindGenerate                // text or input_ids, as a prompt
	KindMessages                // Anthropic's: tools, system, then messages and their blocks
)

// The endpoints, vllm-router's set: OpenAI's, vLLM's rerank, SGLang's
// native /generate, and Anthropic's Messages API.
var (
	Completions     = &Endpoint{Path: "/v1/completions", Kind: KindCompletions, TextField: "prompt", PD: true, NeedsModel: true}
	ChatCompletions = &Endpoint{Path: "/v1/chat/completions", Kind: KindChat, TextField: "messages", PD: true, NeedsModel: true}
	Embeddings      = &Endpoint{Path: "/v1/embeddings", Kind: KindEmbeddings, TextField: "input"}
	Rerank          = &Endpoint{Path: "/v1/rerank", Kind: KindRerank, TextField: "query"}
	RerankBare      = &Endpoint{Path: "/rerank", Kind: KindRerank, TextField: "query"}
	Responses       = &Endpoint{Path: "/v1/responses", Kind: KindResponses, TextField: "input"}
	Generate        = &Endpoint{Path: "/generate", Kind: KindGenerate, TextField: "text or input_ids"}
	// Anthropic's Messages API, as vLLM serves it (kv_transfer_params
	// included, so it disaggregates as chat does).
	Messages            = &Endpoint{Path: "/v1/messages", Kind: KindMessages, TextField: "messages", PD: true, NeedsModel: true}
	MessagesCountTokens = &Endpoint{Path: "/v1/messages/count_tokens", Kind: KindMessages, TextField: "messages", NeedsModel: true,
		Counts: true}

	// The endpoints forwarded whole, without routing text: named for the
	// metrics.
	StoredResponses = &Endpoint{Path: "/v1/responses/{id}"}
	WorkerInfo      = &Endpoint{Path: "/get_model_info|/get_server_info|/health_generate"}

	Endpoints = []*Endpoint{Completions, ChatCompletions, Embeddings, Rerank, RerankBare, Responses, Generate,
		Messages, MessagesCountTokens, StoredResponses, WorkerInfo}
)

func init() {
	for i, ep := range Endpoints {
		ep.ID = i
	}
}

// EndpointAt returns the routed endpoint served at path, or nil.
func EndpointAt(path []byte) *Endpoint {
	for _, ep := range Endpoints {
		if ep.Kind != KindNone && string(path) == ep.Path {
			return ep
		}
	}
	return nil
}
