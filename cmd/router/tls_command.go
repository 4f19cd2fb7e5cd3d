package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster/link"
)

// tlsCommand makes the cluster's TLS material: `router tls init DIR NODE...`.
func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "TLS material for the links between replicas",
		Subcommands: []*cli.Command{{
			Name:  "init",
			Usage: "write a cluster CA (reused if DIR has one) and a certificate and key per node name",
			Description: "Writes DIR/ca.pem and DIR/ca-key.pem (kept to sign certificates for nodes added later) and, " +
				"per NODE, DIR/NODE.pem and DIR/NODE-key.pem. Start each replica with --cluster-tls-cert DIR/NODE.pem " +
				"--cluster-tls-key DIR/NODE-key.pem --cluster-tls-ca DIR/ca.pem. Keep ca-key.pem away from the replicas.",
			ArgsUsage: "DIR NODE [NODE...]",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "valid-for", Value: link.DefaultCertValidity,
					Usage: "how long the node certificates are valid"},
				&cli.StringSliceFlag{Name: "san", Usage: "extra host name or IP address in every node certificate (repeatable)"},
			},
			Action: tlsInit,
		}},
	}
}

func tlsInit(c *cli.Context) error {
	if c.NArg() < 2 {
		return errors.New("tls init: want DIR and at least one NODE name")
	}
	dir := c.Args().First()
	valid := c.Duration("valid-for")
	if valid < time.Hour {
		return fmt.Errorf("--valid-for: %s is too short to be useful", valid)
	}
	written, err := link.WriteCerts(dir, c.Args().Tail(), link.CertOptions{ValidFor: valid, SANs: c.StringSlice("san")})
	for _, f := range written {
		fmt.Fprintln(c.App.Writer, "wrote", f)
	}
	if err != nil {
		return err
	}
	node := c.Args().Tail()[0]
	files := link.NodeTLSFiles(dir, node)
	_, err = fmt.Fprintf(c.App.Writer, "start %s with: --cluster-tls-cert %s --cluster-tls-key %s --cluster-tls-ca %s\n",
		node, files.CertFile, files.KeyFile, filepath.Join(dir, "ca.pem"))
	return err
}
