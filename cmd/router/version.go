package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/loadsync"
)

// versionCommand prints the release and the version of every wire this
// build speaks to its peers: what decides which builds may share a tier
// (docs/compatibility.md).
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the release and the versions of the wires it speaks",
		Action: func(c *cli.Context) error {
			writeVersion(c.App.Writer)
			return nil
		},
	}
}

// wireNotes says what each wire of cluster.Wires is.
var wireNotes = map[string]string{
	"rpc":      "the cluster port's HTTP between replicas",
	"raft-log": "Raft log entries: registry commands",
	"registry": "registry snapshots on disk",
}

// writeVersion writes the release on the first line, then one line a wire:
// its name, the versions it speaks, and what it is.
func writeVersion(w io.Writer) {
	fmt.Fprintf(w, "router %s\n", version)
	gossip, types := loadsync.Protocol()
	fmt.Fprintf(w, "  %-9s %-5s %s\n", "gossip", fmt.Sprint(gossip), "gossip protocol; message types read: "+types)
	wires := cluster.Wires()
	for _, name := range slices.Sorted(maps.Keys(wires)) {
		fmt.Fprintf(w, "  %-9s %-5s %s\n", name, wires[name], wireNotes[name])
	}
}
