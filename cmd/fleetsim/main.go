package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at link time by the Makefile.
var version = "dev"

func main() {
	app := newApp(os.Stdout, os.Stderr)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

// newApp builds the command line; the table goes to stdout, progress to
// stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "fleetsim",
		Usage:     "simulate router replicas in front of inference workers on virtual time, running the real routing code",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     flags(),
		Action: func(c *cli.Context) error {
			p, err := readPlan(c)
			if err != nil {
				return err
			}
			return execute(p, stdout, stderr)
		},
	}
}
