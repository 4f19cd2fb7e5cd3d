package health

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTheLatestLoRASeriesIsTheEnginesState(t *testing.T) {
	// vLLM stamps a series with the time it set it; the old ones stay.
	page := `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a1",waiting_lora_adapters=""} 1.7966014151e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a3,a1",waiting_lora_adapters="a2"} 1.7966014172e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7966014160e+09
`
	got, err := parseEngineMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	l := got.lora
	if !l.ok || l.maxLoRA != 2 || !slices.Equal(l.running, []string{"a3", "a1"}) || !slices.Equal(l.waiting, []string{"a2"}) {
		t.Fatalf("read %+v, want max 2, running a3 and a1, waiting a2", l)
	}
}

func TestLoRASeriesOfTheSameSecondAreMerged(t *testing.T) {
	// llm-d-inference-sim stamps whole seconds: which series is the latest
	// within one is unknown, and every adapter of them ran in that second.
	page := `vllm:lora_requests_info{max_lora="2",running_lora_adapters="a2",waiting_lora_adapters=""} 1.796601417e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a2,a3",waiting_lora_adapters="a1"} 1.796601417e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a9",waiting_lora_adapters=""} 1.796601415e+09
`
	got, _ := parseEngineMetrics(strings.NewReader(page))
	if l := got.lora; !slices.Equal(l.running, []string{"a2", "a3"}) || !slices.Equal(l.waiting, []string{"a1"}) {
		t.Fatalf("read %+v, want running a2 and a3, waiting a1", l)
	}
}

func TestAPageWithoutLoRASaysNothingOfIt(t *testing.T) {
	for _, page := range []string{
		"vllm:num_requests_running 3\n",
		`vllm:lora_requests_info{max_lora="2",running_lora_adapters="a1 1` + "\n", // unclosed
		`vllm:lora_requests_info{max_lora=2} 1` + "\n",                            // unquoted
	} {
		got, err := parseEngineMetrics(strings.NewReader(page))
		if err != nil {
			t.Fatal(err)
		}
		if got.lora.ok {
			t.Errorf("%q read as %+v", page, got.lora)
		}
	}
}

func TestLoRANamesAreUnescapedAndBounded(t *testing.T) {
	var many []string
	for i := range 3 * maxLoRANames {
		many = append(many, fmt.Sprint("a", i))
	}
	long := strings.Repeat("x", maxLoRANameSize+1)
	page := fmt.Sprintf(`vllm:lora_requests_info{max_lora="4",running_lora_adapters="%s",waiting_lora_adapters="q\"uote,%s"} 5`+"\n",
		strings.Join(many, ","), long)
	got, _ := parseEngineMetrics(strings.NewReader(page))
	l := got.lora
	if len(l.running) != maxLoRANames || !slices.Equal(l.waiting, []string{`q"uote`}) {
		t.Fatalf("%d running (bound %d), waiting %q", len(l.running), maxLoRANames, l.waiting)
	}
}
