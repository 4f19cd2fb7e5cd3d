package main

import (
	"strings"
	"testing"
)

func TestLoRAResidencyIsOnAndLoadingOffByDefault(t *testing.T) {
	cfg, err := parseServe(t)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.LoRA.Residency || cfg.LoRA.LoadPath != "" {
		t.Fatalf("defaults %+v, want residency on and no loading", cfg.LoRA)
	}
	cfg, err = parseServe(t, "--lora-residency=false", "--lora-load-path", "/adapters/{name}")
	if err != nil || cfg.LoRA.Residency || cfg.LoRA.LoadPath != "/adapters/{name}" {
		t.Fatalf("%+v, %v", cfg.LoRA, err)
	}
}

func TestALoadPathThatDoesNotNameTheAdapterIsRefusedAtStart(t *testing.T) {
	if _, err := parseServe(t, "--lora-load-path", "/adapters/one"); err == nil || !strings.Contains(err.Error(), "--lora-load-path") {
		t.Fatalf("%v, want a refusal naming --lora-load-path", err)
	}
}
