package main

import (
	"fmt"
	"testing"
)

func TestTheModelMixIsZipfAndStickyPerSession(t *testing.T) {
	var models []string
	for i := range 16 {
		models = append(models, fmt.Sprint("a", i))
	}
	m := newModelMix(models, 1, 7)
	counts := map[string]int{}
	for s := range 20000 {
		counts[m.of(s)]++
		if m.of(s) != m.of(s) {
			t.Fatal("a session's model changed")
		}
	}
	// 1/1 : 1/2 : 1/16 of H(16) = 3.38: about 29.6%, 14.8% and 1.8% of the sessions.
	for model, want := range map[string]float64{"a0": 0.296, "a1": 0.148, "a15": 0.0185} {
		if got := float64(counts[model]) / 20000; got < want*0.85 || got > want*1.15 {
			t.Errorf("%s drawn for %.3f of the sessions, want about %.3f", model, got, want)
		}
	}
	if u := newModelMix(models, 0, 7); u.cdf[7] < 0.49 || u.cdf[7] > 0.51 {
		t.Errorf("s=0 is not uniform: %v", u.cdf)
	}
	if newModelMix(nil, 1, 7) != nil {
		t.Error("no models, a mix")
	}
}
