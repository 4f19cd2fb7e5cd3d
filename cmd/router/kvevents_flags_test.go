package main

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
)

// kvFlags parses args as `router serve` would and returns the seeds and the
// KV-event config they give.
func kvFlags(t *testing.T, args ...string) (cluster.Config, error) {
	t.Helper()
	var cfg cluster.Config
	app := &cli.App{Name: "router", Flags: serveFlags(), Action: func(c *cli.Context) error {
		var err error
		if cfg.Seeds, err = seedsFrom(c, cfg.Proxy.WorkerHosts); err != nil {
			return err
		}
		if err := kvEventsFrom(c, &cfg); err != nil {
			return err
		}
		return cfg.KVEvents.Validate()
	}}
	err := app.Run(append([]string{"router"}, args...))
	return cfg, err
}

func TestKVEventsAreOffByDefaultAndTheirEndpointsAlignWithTheWorkerURLs(t *testing.T) {
	cfg, err := kvFlags(t, "--worker-urls", "http://127.0.0.1:8001,http://127.0.0.1:8002")
	if err != nil || cfg.KVEvents.Enabled || cfg.Proxy.Tokenize.Enabled {
		t.Fatalf("defaults: %+v %+v, %v; want the mode off", cfg.KVEvents, cfg.Proxy.Tokenize, err)
	}
	cfg, err = kvFlags(t, "--kv-events", "--worker-urls", "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003",
		"--kv-events-endpoints", "TCP://127.0.0.1:6001,,tcp://127.0.0.1:6003")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range cfg.Seeds {
		got = append(got, s.KVEventsEndpoint)
	}
	if strings.Join(got, " ") != "tcp://127.0.0.1:6001  tcp://127.0.0.1:6003" {
		t.Errorf("endpoints %q", got)
	}
	if !cfg.Proxy.Tokenize.Enabled || cfg.Proxy.Tokenize.Timeout != 20*time.Millisecond || cfg.KVEvents.BlockSize != 16 {
		t.Errorf("mode on: %+v %+v", cfg.KVEvents, cfg.Proxy.Tokenize)
	}
}

func TestABadKVEventsFlagIsRefusedAtStartNamingIt(t *testing.T) {
	for flag, args := range map[string][]string{
		"--kv-events-endpoints":        {"--kv-events", "--worker-urls", "http://127.0.0.1:8001", "--kv-events-endpoints", "http://127.0.0.1:5557"},
		"--kv-events-endpoints ":       {"--kv-events", "--worker-urls", "http://127.0.0.1:8001", "--kv-events-endpoints", "tcp://127.0.0.1:1,tcp://127.0.0.1:2"},
		"--kv-events-endpoints  ":      {"--worker-urls", "http://127.0.0.1:8001", "--kv-events-endpoints", "tcp://127.0.0.1:1"},
		"--kv-events-tokenize-timeout": {"--kv-events", "--kv-events-tokenize-timeout", "0s"},
		"--kv-events-block-size":       {"--kv-events", "--kv-events-block-size", "0"},
		"--kv-events-replay-offset":    {"--kv-events", "--kv-events-replay-offset", "0"},
	} {
		if _, err := kvFlags(t, args...); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(flag)) {
			t.Errorf("%v: err = %v, want a refusal naming %s", args, err, strings.TrimSpace(flag))
		}
	}
}

func TestAKVEventsEndpointOnAMetadataAddressIsRefusedWithoutContactingIt(t *testing.T) {
	_, err := kvFlags(t, "--kv-events", "--worker-urls", "http://127.0.0.1:8001", "--kv-events-endpoints", "tcp://169.254.169.254:5557")
	if err == nil || !strings.Contains(err.Error(), "--kv-events-endpoints") {
		t.Fatalf("err = %v, want the host policy's refusal naming the flag", err)
	}
}
