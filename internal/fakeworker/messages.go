package fakeworker

import "fmt"

// NamedEvent writes one SSE event with an event line, as Anthropic's
// Messages API streams them ("event: <name>\ndata: <data>\n\n"), as one
// chunk.
func (e *Exchange) NamedEvent(name, data string) error {
	ev := "event: " + name + "\ndata: " + data + "\n\n"
	return e.Raw(fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
}

// MessageUsage is the usage an Anthropic answer of the fake worker carries:
// a prompt of 300 tokens, 200 of them read from the cache.
const MessageUsage = `{"input_tokens":100,"cache_read_input_tokens":200,"cache_creation_input_tokens":0,"output_tokens":%d}`

// Message is the JSON body of an Anthropic message from worker name.
func Message(name string) string {
	return fmt.Sprintf(`{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"ok"}],`+
		`"stop_reason":"end_turn","stop_sequence":null,"usage":`+MessageUsage+`}`, name, 1)
}

// MessageStream answers with an Anthropic stream of n text deltas: the
// usage of the prompt in message_start (and not at the end, as some
// engines do), then message_stop.
func MessageStream(n int) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() == nil && e.messageEvents(n) &&
			e.NamedEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d}}`, n)) == nil &&
			e.NamedEvent("message_stop", `{"type":"message_stop"}`) == nil {
			_ = e.Raw("0\r\n\r\n")
		}
	}
}

// MessageStreamThenCut sends n text deltas of an Anthropic stream, then
// closes the connection: an engine that died mid-stream.
func MessageStreamThenCut(n int) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() == nil && e.messageEvents(n) {
			e.Cut()
		}
	}
}

// messageEvents writes message_start and n text deltas; false when a write
// failed.
func (e *Exchange) messageEvents(n int) bool {
	start := fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],`+
		`"model":%q,"stop_reason":null,"usage":`+MessageUsage+`}}`, e.Worker.Name, 0)
	if e.NamedEvent("message_start", start) != nil || e.NamedEvent("ping", `{"type":"ping"}`) != nil {
		return false
	}
	for i := range n {
		if e.NamedEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"t%d"}}`, i)) != nil {
			return false
		}
	}
	return true
}
