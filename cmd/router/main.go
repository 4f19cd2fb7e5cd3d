// Command router runs a replica of the cache-aware router tier and talks to
// the admin API of running ones.
package main

import (
	"fmt"
	"os"

	"github.com/VictoriaMetrics/metrics"
	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	metrics.ExposeMetadata(true) // # TYPE lines, so Prometheus reads histograms as histograms
	if err := newApp().Run(normalizeArgs(os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

// newApp is the command line: `router serve` and the admin commands.
func newApp() *cli.App {
	return &cli.App{
		Name:     "router",
		Usage:    "a cache-aware router for LLM inference fleets that runs as a cluster of replicas",
		Commands: append([]*cli.Command{serveCommand(), versionCommand()}, append(adminCommands(), tlsCommand())...),
	}
}
