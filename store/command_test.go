package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCommandsRoundTripThroughEncodeDecode(t *testing.T) {
	cfg := RoutingConfig{BlockSize: 256, Policy: "cache_aware", MissPlacement: "rendezvous",
		CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5}
	cmds := []Command{
		NewAddWorker(AddWorker{URL: "http://10.0.0.1:8000", Role: RolePrefill, Model: "m",
			BootstrapPort: 8998, Labels: map[string]string{"zone": "a"}}),
		NewAddWorker(AddWorker{URL: "https://w.example:443"}),
		NewRemoveWorker(7),
		NewSetWorkerState(3, StateDraining),
		NewSetRoutingConfig(cfg),
	}
	for _, cmd := range cmds {
		t.Run(string(cmd.Kind), func(t *testing.T) {
			data, err := cmd.Encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got, err := Decode(data)
			if err != nil {
				t.Fatalf("decode %s: %v", data, err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", got, cmd)
			}
		})
	}
}

func TestEncodeNormalisesTheWorkerURL(t *testing.T) {
	data, err := NewAddWorker(AddWorker{URL: "HTTP://Worker-1.LAN:08000/"}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.AddWorker.URL != "http://worker-1.lan:8000" {
		t.Fatalf("url = %q, want http://worker-1.lan:8000", got.AddWorker.URL)
	}
}

func TestNormalizeURL(t *testing.T) {
	good := map[string]string{
		"http://a:1":                 "http://a:1",
		"HTTPS://Host.Example:8443/": "https://host.example:8443",
		"http://10.1.2.3:8000//":     "http://10.1.2.3:8000",
		"http://[::1]:9000":          "http://[::1]:9000",
		"http://h:8000/Prefix/v1/":   "http://h:8000/Prefix/v1",
		" http://h:8000 ":            "http://h:8000",
		"http://h:00080":             "http://h:80",
		"http://h":                   "http://h:80",
		"http://127.1:8000/w1":       "http://127.0.0.1:8000/w1",
		"http://0x7f000001:8000":     "http://127.0.0.1:8000",
	}
	for in, want := range good {
		got, err := NormalizeURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "h:8000", "ftp://h:21", "http://:80", "http://h:0",
		"http://h:65536", "http://h:x", "http://u:p@h:1", "http://h:1?q=1", "http://h:1#f",
		"http://h:1?", "mailto:a@b", "http://h:1/\x00", "http://[fe80::1%25eth0]:800"}
	for _, in := range bad {
		if got, err := NormalizeURL(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizeURL(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	}
}

func TestValidationErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name  string
		cmd   Command
		field string
	}{
		{"bad url", NewAddWorker(AddWorker{URL: "nope"}), "url"},
		{"bad role", NewAddWorker(AddWorker{URL: "http://h:1", Role: "boss"}), "role"},
		{"bad port", NewAddWorker(AddWorker{URL: "http://h:1", BootstrapPort: 70000}), "bootstrap_port"},
		{"long model", NewAddWorker(AddWorker{URL: "http://h:1", Model: strings.Repeat("m", MaxModelBytes+1)}), "model"},
		{"empty label key", NewAddWorker(AddWorker{URL: "http://h:1", Labels: map[string]string{"": "v"}}), "labels"},
		{"remove id 0", NewRemoveWorker(0), "id"},
		{"state id 0", NewSetWorkerState(0, StateActive), "id"},
		{"bad state", NewSetWorkerState(1, "asleep"), "state"},
		{"zero block size", NewSetRoutingConfig(RoutingConfig{}), "config.block_size"},
		{"threshold above 1", NewSetRoutingConfig(RoutingConfig{BlockSize: 16, CacheThreshold: 1.5}), "config.cache_threshold"},
		{"negative abs", NewSetRoutingConfig(RoutingConfig{BlockSize: 16, BalanceAbsThreshold: -1}), "config.balance_abs_threshold"},
		{"no version", Command{Kind: KindRemoveWorker, RemoveWorker: &RemoveWorker{ID: 1}}, "v"},
		{"no payload", Command{Version: 1, Kind: KindRemoveWorker}, "kind"},
		{"two payloads", Command{Version: 1, Kind: KindRemoveWorker, RemoveWorker: &RemoveWorker{ID: 1},
			SetWorkerState: &SetWorkerState{ID: 1, State: StateActive}}, "kind"},
		{"kind mismatch", Command{Version: 1, Kind: KindAddWorker, RemoveWorker: &RemoveWorker{ID: 1}}, "kind"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cmd.Encode()
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a *FieldError wrapping ErrInvalid", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field = %q, want %q (err %v)", fe.Field, tc.field, err)
			}
		})
	}
}

func TestDecodeRefusesWhatTheEncoderNeverWrites(t *testing.T) {
	cases := map[string]struct {
		data string
		want error
	}{
		"not json":        {`{`, ErrInvalid},
		"unknown field":   {`{"v":1,"kind":"remove_worker","remove_worker":{"id":1},"x":1}`, ErrInvalid},
		"trailing data":   {`{"v":1,"kind":"remove_worker","remove_worker":{"id":1}} {}`, ErrInvalid},
		"negative id":     {`{"v":1,"kind":"remove_worker","remove_worker":{"id":-1}}`, ErrInvalid},
		"newer version":   {`{"v":2,"kind":"remove_worker","remove_worker":{"id":1}}`, ErrUnsupportedVersion},
		"unknown kind":    {`{"v":1,"kind":"reboot","remove_worker":{"id":1}}`, ErrInvalid},
		"oversized input": {`{"v":1,"kind":"add_worker","add_worker":{"url":"` + strings.Repeat("a", MaxCommandBytes) + `"}}`, ErrInvalid},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode([]byte(tc.data)); !errors.Is(err, tc.want) {
				t.Fatalf("Decode err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNormalizeDoesNotShareLabelsWithTheCaller(t *testing.T) {
	labels := map[string]string{"zone": "a"}
	cmd, err := NewAddWorker(AddWorker{URL: "http://h:1", Labels: labels}).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	labels["zone"] = "b"
	if cmd.AddWorker.Labels["zone"] != "a" {
		t.Fatal("normalised command shares its labels map with the caller")
	}
}
