package main

import (
	"errors"
	"testing"

	"github.com/valyala/fastjson"
)

func TestParseInferenceReadsTheFieldsTheWorkerNeeds(t *testing.T) {
	var p fastjson.Parser
	r, err := parseInference(&p, []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},
		"max_tokens":5,"max_completion_tokens":7,"messages":[{"role":"user","content":"hi"}],
		"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1,2,3]},
		"bootstrap_room":12}`), true)
	if err != nil {
		t.Fatal(err)
	}
	if r.model != "m" || !r.stream || !r.includeUsage || r.maxTokens != 7 || string(r.prompt) != "user\nhi\n" {
		t.Fatalf("parsed %+v", r)
	}
	if r.kv == nil || !r.kv.doRemotePrefill || r.kv.remoteEngineID != "e" || r.kv.remoteBlocks != 3 || !r.bootstrap {
		t.Fatalf("P/D fields = %+v, bootstrap %v", r.kv, r.bootstrap)
	}
}

func TestParseInferenceDefaults(t *testing.T) {
	var p fastjson.Parser
	r, err := parseInference(&p, []byte(`{"prompt":"x","kv_transfer_params":null,"bootstrap_room":null}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.model != "" || r.stream || r.maxTokens != defaultMaxTokens || r.kv != nil || r.bootstrap {
		t.Fatalf("parsed %+v", r)
	}
}

func TestParseInferenceRefusesWrongTypes(t *testing.T) {
	var p fastjson.Parser
	for _, body := range []string{`{"prompt":"x","model":1}`, `{"prompt":"x","stream_options":1}`,
		`{"prompt":"x","max_tokens":1.5}`, `{"prompt":"x","kv_transfer_params":[]}`,
		`{"prompt":"x","kv_transfer_params":{"do_remote_decode":"yes"}}`, `"x"`, ``} {
		if _, err := parseInference(&p, []byte(body), false); !errors.Is(err, errBadRequest) {
			t.Errorf("%s: err = %v, want errBadRequest", body, err)
		}
	}
}

// FuzzParseInference feeds the request parser arbitrary bodies: it must never panic, and what it
// accepts must be servable.
func FuzzParseInference(f *testing.F) {
	seeds := []string{
		`{"prompt":"hello","max_tokens":3}`,
		`{"model":"m","prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url"}]}]}`,
		`{"messages":[{"role":"system","content":null}],"max_completion_tokens":9007199254740993}`,
		`{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1]}}`,
		`{"prompt":"x","bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":5}`,
		`{"prompt":`, `[]`, `null`, `{"messages":{}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := parseInference(&p, body, chat)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error %v is not a bad request", err)
			}
			return
		}
		if r.maxTokens < 1 || r.maxTokens > 1<<31-1 {
			t.Fatalf("accepted max tokens %d", r.maxTokens)
		}
		if r.kv != nil && r.kv.remoteBlocks < 0 {
			t.Fatalf("negative block count")
		}
	})
}

func TestParseFault(t *testing.T) {
	cases := map[string]fault{
		``:                                 {Mode: faultNone},
		`wedge`:                            {Mode: faultWedge},
		`degrade`:                          {Mode: faultDegrade, Factor: defaultDegradeFactor},
		`slow_health`:                      {Mode: faultSlowHealth, DelayMs: defaultHealthDelay},
		`errors`:                           {Mode: faultErrors, Rate: 1},
		`{"mode":"errors","rate":0}`:       {Mode: faultErrors, Rate: 0},
		`{"mode":"crash","delay_ms":1500}`: {Mode: faultCrash, DelayMs: 1500},
		`{"mode":"degrade","factor":2.5,"rate":0.3}`: {Mode: faultDegrade, Factor: 2.5},
	}
	for text, want := range cases {
		got, err := parseFault(text)
		if err != nil || got != want {
			t.Errorf("parseFault(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{`melt`, `{"mode":5}`, `{"mode":"errors","rate":"x"}`, `{"mode":"errors","rate":1.5}`} {
		if _, err := parseFault(bad); !errors.Is(err, errBadFault) {
			t.Errorf("parseFault(%q) err = %v", bad, err)
		}
	}
}

// FuzzParseFault: the admin endpoint's parser never panics and accepts only valid faults.
func FuzzParseFault(f *testing.F) {
	for _, s := range []string{`{"mode":"errors","rate":0.5}`, `{"mode":"slow_health","delay_ms":1e30}`, `wedge`, `{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := parseFault(text)
		if err != nil {
			return
		}
		if again, err := got.validate(); err != nil || again != got {
			t.Fatalf("accepted %+v, which does not validate: %v", got, err)
		}
	})
}

// FuzzParseEndpointBodies feeds the parsers of embeddings, rerank, Responses and /generate
// arbitrary bodies: they never panic, refuse only with a bad request or an unknown model, and
// what they accept is servable.
func FuzzParseEndpointBodies(f *testing.F) {
	seeds := []string{
		`{"input":["a","b"],"dimensions":8,"encoding_format":"base64"}`, `{"input":[[1,2],[3]]}`, `{"input":[1,2,3]}`,
		`{"messages":[{"role":"user","content":"x"}]}`,
		`{"query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"instructions":"i","max_output_tokens":3,"background":true}`,
		`{"input":"x","previous_response_id":"resp_1","store":false,"stream":true}`,
		`{"text":"x","sampling_params":{"max_new_tokens":4},"rid":"r","bootstrap_room":1}`, `{"input_ids":[1,2]}`,
		`{"model":"other","input":"x"}`, `{"input":[-1]}`, `{`, `[]`,
	}
	for _, s := range seeds {
		for kind := range uint8(4) {
			f.Add([]byte(s), kind)
		}
	}
	cfg := testConfig()
	models := &modelCatalog{cfg: cfg}
	api := &inferenceAPI{cfg: cfg, models: models}
	responses := &responsesAPI{models: models}
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, body []byte, kind uint8) {
		var err error
		switch kind % 4 {
		case 0:
			var r embeddingsRequest
			if r, err = api.parseEmbeddings(&p, body); err == nil && (len(r.inputs) == 0 || r.dims > cfg.embeddingDims) {
				t.Fatalf("accepted %+v", r)
			}
		case 1:
			var r rerankRequest
			if r, err = api.parseRerank(&p, body); err == nil && r.topN < 0 {
				t.Fatalf("accepted top_n %d", r.topN)
			}
		case 2:
			var r responsesRequest
			if r, err = responses.parseResponses(&p, body); err == nil && (r.maxOutput < 0 || (r.background && (!r.store || r.stream))) {
				t.Fatalf("accepted %+v", r)
			}
		case 3:
			var r inferenceRequest
			if r, _, err = api.parseGenerate(&p, body); err == nil && (r.maxTokens < 1 || r.maxTokens > 1<<31-1) {
				t.Fatalf("accepted max tokens %d", r.maxTokens)
			}
		}
		if err != nil && !errors.Is(err, errBadRequest) && !errors.Is(err, errModelNotFound) {
			t.Fatalf("error %v is neither a bad request nor an unknown model", err)
		}
	})
}
