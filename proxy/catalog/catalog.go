package catalog

import (
	"encoding/json"
	"slices"
)

// Served is what a worker's /v1/models lists: every model it serves, and
// those of them that are LoRA adapters (vLLM names an adapter's base model
// as its parent; a base model has none).
type Served struct {
	Names    []string
	Adapters []string
}

// Parse reads a worker's /v1/models answer.
func Parse(body []byte) (Served, error) {
	var list struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return Served{}, err
	}
	out := Served{Names: make([]string, 0, len(list.Data))}
	for _, d := range list.Data {
		if d.ID == "" {
			continue
		}
		out.Names = append(out.Names, d.ID)
		if d.Parent != "" && d.Parent != d.ID {
			out.Adapters = append(out.Adapters, d.ID)
		}
	}
	return out, nil
}

// Equal reports whether s lists what o does, in the same order.
func (s Served) Equal(o Served) bool {
	return slices.Equal(s.Names, o.Names) && slices.Equal(s.Adapters, o.Adapters)
}

// WithAdapter is s with the adapter name added, as a model and as an
// adapter; s's lists are not written to.
func (s Served) WithAdapter(name string) Served {
	return Served{Names: append(slices.Clip(s.Names), name), Adapters: append(slices.Clip(s.Adapters), name)}
}

// ListBody is the router's GET /v1/models answer: the models named by seen,
// sorted, in OpenAI's list shape.
func ListBody(seen map[string]bool) []byte {
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, n := range names {
		list.Data = append(list.Data, model{ID: n, Object: "model", OwnedBy: "kvrouter"})
	}
	body, _ := json.Marshal(list)
	return body
}
