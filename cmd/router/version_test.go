package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersionNamesTheReleaseAndEveryWire: `router version` says which
// release this is and which version of every wire it speaks, what decides
// whether two builds may share a tier.
func TestVersionNamesTheReleaseAndEveryWire(t *testing.T) {
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	if err := app.Run([]string{"router", "version"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != "router "+version {
		t.Fatalf("first line %q, want the release", lines[0])
	}
	for _, want := range []string{"gossip    3     gossip protocol; message types read: 1-10,13", "rpc       1 ",
		"raft-log  1 ", "registry  1 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line with %q in\n%s", want, out.String())
		}
	}
}
