package wire

// The reference reading of Anthropic's Messages API bodies, on the
// document tree: the keys named twice, where the router reads, and then
// the rendering of the simulated engine (sim.AppendMessagesJSON), which is
// what a workersim caches. parseInference must agree with it.

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/sim"
)

// treeRenderAnthropic renders a Messages API request: tools, system, then
// the messages.
func treeRenderAnthropic(v *fastjson.Value) ([]byte, error) {
	if err := treeAnthropicKeys(v); err != nil {
		return nil, err
	}
	if v.Get("messages") == nil {
		return nil, Errorf(ErrBadRequest, "missing required field: messages")
	}
	if len(v.GetArray("tools")) > maxTools {
		return nil, Errorf(ErrBadRequest, "too many tools")
	}
	text, err := sim.AppendMessagesJSON(nil, v)
	if err != nil {
		return nil, Errorf(ErrBadRequest, "%v", err)
	}
	return text, nil
}

// treeAnthropicKeys refuses a key named twice in the objects the router
// reads: metadata, the system blocks, the messages, their blocks (and
// those of a tool_result) and the sources of images.
func treeAnthropicKeys(v *fastjson.Value) error {
	objects := []*fastjson.Value{v.Get("metadata")}
	objects = append(objects, v.GetArray("system")...)
	for _, m := range v.GetArray("messages") {
		objects = append(objects, m)
		for _, b := range m.GetArray("content") {
			objects = append(objects, b, imageSource(b))
			if string(b.GetStringBytes("type")) != "tool_result" {
				continue
			}
			for _, nb := range b.GetArray("content") {
				objects = append(objects, nb, imageSource(nb))
			}
		}
	}
	for i, o := range objects {
		if o == nil || o.Type() != fastjson.TypeObject {
			continue
		}
		if err := treeUniqueKeys(o, fmt.Sprintf("object %d", i)); err != nil {
			return err
		}
	}
	return nil
}

// imageSource is the source of an image block, nil for another block.
func imageSource(b *fastjson.Value) *fastjson.Value {
	if string(b.GetStringBytes("type")) != "image" {
		return nil
	}
	return b.Get("source")
}
