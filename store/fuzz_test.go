package store

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode, as a peer's log entry or a
// forwarded admin write might. Whatever decodes must be valid, re-encode
// and decode to the same command, and apply without panicking.
func FuzzDecode(f *testing.F) {
	seeds := []Command{
		NewAddWorker(AddWorker{URL: "http://w:8000", Role: RolePrefill, Model: "m",
			BootstrapPort: 1, Labels: map[string]string{"k": "v"}}),
		NewRemoveWorker(1),
		NewSetWorkerState(1, StateDraining),
		NewSetRoutingConfig(baseConfig()),
	}
	for _, c := range seeds {
		data, err := c.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"v":1,"kind":"add_worker","add_worker":{"url":"HTTP://[::1]:1/a/"}}`))
	f.Add([]byte(`{"v":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("Decode error %v wraps neither ErrInvalid nor ErrUnsupportedVersion", err)
			}
			return
		}
		again, err := cmd.Encode()
		if err != nil {
			t.Fatalf("decoded command does not re-encode: %v", err)
		}
		back, err := Decode(again)
		if err != nil || !reflect.DeepEqual(back, cmd) {
			t.Fatalf("re-encoded command decodes to %+v, %v; want %+v", back, err, cmd)
		}
		applyEntry(NewFSM(), 1, data)
	})
}

// FuzzNormalizeURL checks that normalisation is idempotent: a normalised URL
// is its own normal form, which snapshots rely on.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{"http://a:1", "HTTPS://H:0443/x/", "http://[::1]:80", "http://h:1/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		n, err := NormalizeURL(raw)
		if err != nil {
			return
		}
		again, err := NormalizeURL(n)
		if err != nil || again != n {
			t.Fatalf("NormalizeURL(%q) = %q, but NormalizeURL(%q) = %q, %v", raw, n, n, again, err)
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore, as a leader's
// InstallSnapshot might: it must either refuse them or leave a registry that
// round-trips through Snapshot.
func FuzzRestore(f *testing.F) {
	a := NewFSM()
	applyEntry(a, 1, mustEncode(f, NewAddWorker(AddWorker{URL: "http://w:1"})))
	f.Add(snapshotBytes(f, a))
	f.Add([]byte(`{"v":1,"index":0,"next_id":1,"workers":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM()
		if err := restoreBytes(fsm, data); err != nil {
			return
		}
		again := NewFSM()
		if err := restoreBytes(again, snapshotBytes(t, fsm)); err != nil {
			t.Fatalf("a restored registry does not survive its own snapshot: %v", err)
		}
	})
}

func mustEncode(f *testing.F, c Command) []byte {
	data, err := c.Encode()
	if err != nil {
		f.Fatal(err)
	}
	return data
}
