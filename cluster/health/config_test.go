package health

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValidAndMatchesRouterDefaults(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
	if cfg.Interval != 60*time.Second || cfg.Timeout != 5*time.Second ||
		cfg.FailureThreshold != 3 || cfg.SuccessThreshold != 2 || cfg.Endpoint != "/health" {
		t.Errorf("active-check defaults differ from the flags' established defaults: %+v", cfg)
	}
	if cfg.CBFailureThreshold != 10 || cfg.CBSuccessThreshold != 3 || cfg.CBTimeout != 60*time.Second {
		t.Errorf("breaker defaults differ from the flags' established defaults: %+v", cfg)
	}
}

func TestValidateNamesTheOffendingField(t *testing.T) {
	cases := []struct {
		field, flag string
		mutate      func(*Config)
	}{
		{"Interval", "--health-check-interval-secs", func(c *Config) { c.Interval = 0 }},
		{"Timeout", "--health-check-timeout-secs", func(c *Config) { c.Timeout = -time.Second }},
		{"Timeout", "--health-check-timeout-secs", func(c *Config) { c.Timeout = c.Interval + 1 }},
		{"FailureThreshold", "--health-failure-threshold", func(c *Config) { c.FailureThreshold = 0 }},
		{"SuccessThreshold", "--health-success-threshold", func(c *Config) { c.SuccessThreshold = 0 }},
		{"Endpoint", "--health-check-endpoint", func(c *Config) { c.Endpoint = "health" }},
		{"CBFailureThreshold", "--cb-failure-threshold", func(c *Config) { c.CBFailureThreshold = 0 }},
		{"CBSuccessThreshold", "--cb-success-threshold", func(c *Config) { c.CBSuccessThreshold = 0 }},
		{"CBTimeout", "--cb-timeout-duration-secs", func(c *Config) { c.CBTimeout = 0 }},
		{"CBHalfOpenTrials", "", func(c *Config) { c.CBHalfOpenTrials = 0 }},
		{"WedgeTimeout", "--wedge-timeout", func(c *Config) { c.WedgeTimeout = 0 }},
		{"DegradeRatio", "--degrade-ratio", func(c *Config) { c.DegradeRatio = 1 }},
		{"DegradeRatio", "--degrade-ratio", func(c *Config) { c.DegradeRatio = 0 }},
		{"DegradeWindow", "--degrade-window", func(c *Config) { c.DegradeWindow = 0 }},
		{"DegradeMinSamples", "", func(c *Config) { c.DegradeMinSamples = 0 }},
		{"EvalInterval", "", func(c *Config) { c.EvalInterval = 0 }},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.mutate(&cfg)
		err := cfg.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want a *ConfigError wrapping ErrInvalidConfig", tc.field, err)
			continue
		}
		if ce.Field != tc.field || ce.Flag != tc.flag {
			t.Errorf("Validate() blamed %q (%q), want %q (%q)", ce.Field, ce.Flag, tc.field, tc.flag)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("message %q does not name %s", err, tc.field)
		}
	}
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WedgeTimeout = 0
	if _, err := New(cfg, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with invalid config: err = %v, want ErrInvalidConfig", err)
	}
}
