package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
)

// keyringCommand rotates the gossip key of a running cluster through any
// replica: install the new key, use it, remove the old one.
func keyringCommand() *cli.Command {
	change := func(op, usage string) *cli.Command {
		return &cli.Command{Name: op, Usage: usage, ArgsUsage: "KEY", Flags: adminFlags(), Action: keyringChange(op)}
	}
	return &cli.Command{
		Name:  "keyring",
		Usage: "the gossip keys of every live replica (rotation: install NEW, use NEW, remove OLD)",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "each replica's primary key and installed keys, as fingerprints",
				Flags: adminFlags(), Action: keyringList},
			change("install", "let every replica accept gossip encrypted with KEY (base64)"),
			change("use", "make every replica encrypt its gossip with KEY, which must be installed"),
			change("remove", "stop accepting KEY (not the key in use)"),
		},
	}
}

type keyringReply struct {
	Nodes []adminapi.NodeKeyring `json:"nodes"`
}

func keyringList(c *cli.Context) error {
	var reply keyringReply
	raw, err := newAdminClient(c, adminRequestTimeout).getJSON("/cluster/keyring", &reply)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printRaw(c, raw)
	}
	return printKeyrings(c.App.Writer, reply.Nodes)
}

func keyringChange(op string) cli.ActionFunc {
	return func(c *cli.Context) error {
		key := c.Args().First()
		if key == "" || c.NArg() > 1 {
			return errors.New("want exactly one base64 KEY")
		}
		data, _, err := newAdminClient(c, adminRequestTimeout).call(http.MethodPost, "/cluster/keyring/"+op,
			map[string]string{"key": key})
		if err != nil {
			return err // a partial failure names the replicas
		}
		if c.Bool("json") {
			return printRaw(c, data)
		}
		var reply keyringReply
		if err := json.Unmarshal(data, &reply); err != nil {
			return fmt.Errorf("unexpected reply: %w", err)
		}
		return printKeyrings(c.App.Writer, reply.Nodes)
	}
}

func printKeyrings(w io.Writer, nodes []adminapi.NodeKeyring) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tPRIMARY\tINSTALLED\tERROR")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Node, orDash(n.Primary, "-"), orDash(strings.Join(n.Keys, ","), "-"),
			orDash(n.Error, "-"))
	}
	return tw.Flush()
}
