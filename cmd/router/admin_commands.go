package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// Timeouts of the admin clients. A write may wait for a Raft commit (and a
// forward to the leader), so it gets more than a read needs.
const (
	adminRequestTimeout = 15 * time.Second
	healthcheckTimeout  = 2 * time.Second
	maxAdminReplyBytes  = 16 << 20
)

// adminCommands are the thin clients of a replica's admin API: workers,
// cluster and healthcheck.
func adminCommands() []*cli.Command {
	return []*cli.Command{workersCommand(), clusterCommand(), healthcheckCommand()}
}

func addrFlag() cli.Flag {
	return &cli.StringFlag{Name: "addr", Value: "http://127.0.0.1:30000", EnvVars: []string{"ROUTER_ADDR"},
		Usage: "base URL of any router replica"}
}

func adminFlags() []cli.Flag {
	return []cli.Flag{
		addrFlag(),
		&cli.StringFlag{Name: "admin-token", EnvVars: []string{"ROUTER_ADMIN_TOKEN"},
			Usage: "bearer token of the admin API (--admin-token of the replica)"},
		&cli.StringFlag{Name: "admin-token-file", EnvVars: []string{"ROUTER_ADMIN_TOKEN_FILE"},
			Usage: "file whose content is --admin-token, which ps then does not show"},
		&cli.BoolFlag{Name: "json", Usage: "print the server's JSON instead of a table"},
	}
}

func workersCommand() *cli.Command {
	return &cli.Command{
		Name:  "workers",
		Usage: "list and change the worker registry of the cluster",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list the workers with their state and merged load",
				Flags: adminFlags(), Action: listWorkers},
			{Name: "add", Usage: "register a worker (idempotent by URL)",
				Flags: append(adminFlags(), addWorkerFlags()...), Action: addWorker},
			{Name: "remove", Usage: "remove a worker", ArgsUsage: "<id|url>",
				Flags:  append(adminFlags(), &cli.StringFlag{Name: "drain", Usage: `"migrate": first move the worker's streams on this replica to other workers, each at its next chunk boundary, then remove it`}),
				Action: removeWorker},
			{Name: "drain", Usage: "stop sending new requests to a worker", ArgsUsage: "<id|url>",
				Flags: adminFlags(), Action: stateAction("drain", "is draining")},
			{Name: "activate", Usage: "undo drain", ArgsUsage: "<id|url>",
				Flags: adminFlags(), Action: stateAction("activate", "is active")},
		},
	}
}

func addWorkerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "url", Required: true, Usage: "base URL of the worker, with port"},
		&cli.StringFlag{Name: "role", Usage: "regular (the default for a new worker), prefill or decode"},
		&cli.StringFlag{Name: "model", Usage: "model the worker serves (empty: any)"},
		&cli.IntFlag{Name: "bootstrap-port", Usage: "KV-transfer bootstrap port of a prefill worker"},
		&cli.StringSliceFlag{Name: "label", Usage: "key=value tag (repeatable)"},
		&cli.StringFlag{Name: "kv-events-endpoint", Usage: "the engine's KV-event PUB socket, tcp://host:port (--kv-events; default: the worker's host, port 5557)"},
		&cli.StringFlag{Name: "kv-events-replay-endpoint", Usage: "the engine's replay socket, tcp://host:port (default: the event socket's port plus --kv-events-replay-offset)"},
		&cli.StringFlag{Name: "kv-events-topic", Usage: "the topic the engine publishes under when it dials the tier (--kv-events-bind), where the topic does not name its host"},
	}
}

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "inspect the router cluster",
		Subcommands: []*cli.Command{
			{Name: "status", Usage: "members, raft leader and term, voters, peers' gossip freshness",
				Flags: adminFlags(), Action: clusterStatus},
			routingCommand(),
			keyringCommand(),
		},
	}
}

func healthcheckCommand() *cli.Command {
	return &cli.Command{
		Name:   "healthcheck",
		Usage:  "exit 0 when the replica at --addr is ready (for container health checks)",
		Flags:  []cli.Flag{addrFlag()},
		Action: healthcheck,
	}
}

// adminClient calls one replica's admin API.
type adminClient struct {
	base     string
	token    string
	tokenErr error // --admin-token-file did not read: every call fails with it
	http     *http.Client
}

func newAdminClient(c *cli.Context, timeout time.Duration) *adminClient {
	token, err := secretFlag(c.String("admin-token"), c.String("admin-token-file"), "admin-token")
	return &adminClient{base: baseURL(c.String("addr")), token: token, tokenErr: err, http: oneShotClient(timeout)}
}

// oneShotClient is an HTTP client for a command that makes a request or two
// and exits: no idle connections are kept.
func oneShotClient(timeout time.Duration) *http.Client {
	transport := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
	return &http.Client{Timeout: timeout, Transport: transport}
}

// baseURL accepts host:port as well as a URL.
func baseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// call sends a request and returns the body of a 2xx answer; any other
// status becomes an error carrying the server's message.
func (a *adminClient) call(method, path string, body any) ([]byte, int, error) {
	req, err := a.request(method, path, body)
	if err != nil {
		return nil, 0, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminReplyBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: read reply: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, serverMessage(data))
	}
	return data, resp.StatusCode, nil
}

func (a *adminClient) request(method, path string, body any) (*http.Request, error) {
	if a.tokenErr != nil {
		return nil, a.tokenErr
	}
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, reader)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", a.base, err)
	}
	if body != nil || method != http.MethodGet {
		// Without --admin-token a replica takes writes only as JSON, so
		// that a web page cannot make them (see the README's admin API).
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return req, nil
}

// serverMessage extracts the message of an OpenAI-style error body, or
// returns the body's text.
func serverMessage(body []byte) string {
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 512 {
		text = text[:512] + "..."
	}
	return text
}

// getJSON fetches path and decodes it into out.
func (a *adminClient) getJSON(path string, out any) ([]byte, error) {
	data, _, err := a.call(http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("GET %s: unexpected reply: %w", path, err)
	}
	return data, nil
}

func listWorkers(c *cli.Context) error {
	client := newAdminClient(c, adminRequestTimeout)
	var list struct{ Workers []store.Worker }
	raw, err := client.getJSON("/workers", &list)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printRaw(c, raw)
	}
	var loads struct{ Workers []adminapi.WorkerLoad }
	if _, err := client.getJSON("/get_loads", &loads); err != nil {
		loads.Workers = nil // the registry alone is still worth printing
	}
	return printWorkers(c.App.Writer, list.Workers, loads.Workers)
}

func printWorkers(w io.Writer, workers []store.Worker, loads []adminapi.WorkerLoad) error {
	byID := make(map[store.WorkerID]adminapi.WorkerLoad, len(loads))
	for _, l := range loads {
		byID[l.ID] = l
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tROLE\tMODEL\tSTATE\tLOAD\tHEALTHY\tLABELS")
	for _, wk := range workers {
		load, healthy := "-", "-"
		if l, ok := byID[wk.ID]; ok {
			load, healthy = fmt.Sprintf("%d (%d here)", l.Load, l.LocalLoad), strconv.FormatBool(l.Healthy)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wk.ID, wk.URL, wk.Role, orDash(wk.Model, "*"),
			wk.State, load, healthy, orDash(formatLabels(wk.Labels), "-"))
	}
	return tw.Flush()
}

func formatLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

func orDash(s, dash string) string {
	if s == "" {
		return dash
	}
	return s
}

func addWorker(c *cli.Context) error {
	labels, err := parseLabels(c.StringSlice("label"))
	if err != nil {
		return err
	}
	body := map[string]any{"url": c.String("url"), "role": c.String("role"), "model": c.String("model"),
		"bootstrap_port": c.Int("bootstrap-port"), "labels": labels, "kv_events_endpoint": c.String("kv-events-endpoint"),
		"kv_events_replay_endpoint": c.String("kv-events-replay-endpoint"), "kv_events_topic": c.String("kv-events-topic")}
	data, status, err := newAdminClient(c, adminRequestTimeout).call(http.MethodPost, "/workers", body)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printRaw(c, data)
	}
	var w store.Worker
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("POST /workers: unexpected reply: %w", err)
	}
	verb := "added"
	if status != http.StatusCreated {
		verb = "already registered:"
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s worker %d %s (%s)\n", verb, w.ID, w.URL, w.Role)
	return err
}

func parseLabels(pairs []string) (map[string]string, error) {
	labels := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", p)
		}
		labels[k] = v
	}
	return labels, nil
}

// resolveWorker turns the <id|url> argument into a worker id, asking the
// registry when it is a URL.
func resolveWorker(c *cli.Context, client *adminClient) (store.WorkerID, error) {
	arg := c.Args().First()
	if arg == "" || c.Args().Len() > 1 {
		return 0, errors.New("want exactly one worker id or URL")
	}
	if id, err := strconv.ParseUint(arg, 10, 32); err == nil {
		return store.WorkerID(id), nil
	}
	want, err := store.NormalizeURL(arg)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a worker id nor a worker URL: %w", arg, err)
	}
	var list struct{ Workers []store.Worker }
	if _, err := client.getJSON("/workers", &list); err != nil {
		return 0, err
	}
	for _, w := range list.Workers {
		if w.URL == want {
			return w.ID, nil
		}
	}
	return 0, fmt.Errorf("no worker is registered with URL %s", want)
}

func removeWorker(c *cli.Context) error {
	client := newAdminClient(c, adminRequestTimeout)
	id, err := resolveWorker(c, client)
	if err != nil {
		return err
	}
	path := fmt.Sprintf("/workers/%d", id)
	switch drain := c.String("drain"); drain {
	case "":
	case adminapi.DrainMigrate:
		path += "?drain=" + drain
	default:
		return fmt.Errorf("--drain: the one value is %q, not %q", adminapi.DrainMigrate, drain)
	}
	data, _, err := client.call(http.MethodDelete, path, nil)
	if err != nil {
		return err
	}
	if c.String("drain") != "" && !c.Bool("json") {
		return reportMigrated(c, data)
	}
	return report(c, data, "removed worker %d %s\n")
}

// reportMigrated prints the answer of a removal with drain=migrate.
func reportMigrated(c *cli.Context, data []byte) error {
	var r adminapi.RemovedWorker
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("unexpected reply: %w", err)
	}
	_, err := fmt.Fprintf(c.App.Writer, "removed worker %d %s: %d streams moved, %d left on it, in %.2f s\n",
		r.ID, r.URL, r.MovedStreams, r.StreamsLeft, r.Seconds)
	return err
}

// stateAction drains or activates the worker named by the argument.
func stateAction(action, done string) cli.ActionFunc {
	return func(c *cli.Context) error {
		client := newAdminClient(c, adminRequestTimeout)
		id, err := resolveWorker(c, client)
		if err != nil {
			return err
		}
		data, _, err := client.call(http.MethodPost, fmt.Sprintf("/workers/%d/%s", id, action), nil)
		if err != nil {
			return err
		}
		return report(c, data, "worker %d %s "+done+"\n")
	}
}

// report prints a worker reply with format (taking id and URL), or raw.
func report(c *cli.Context, data []byte, format string) error {
	if c.Bool("json") {
		return printRaw(c, data)
	}
	var w store.Worker
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("unexpected reply: %w", err)
	}
	_, err := fmt.Fprintf(c.App.Writer, format, w.ID, w.URL)
	return err
}

func printRaw(c *cli.Context, data []byte) error {
	_, err := fmt.Fprintln(c.App.Writer, strings.TrimSpace(string(data)))
	return err
}

func clusterStatus(c *cli.Context) error {
	var st adminapi.Status
	raw, err := newAdminClient(c, adminRequestTimeout).getJSON("/cluster/status", &st)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printRaw(c, raw)
	}
	return printStatus(c.App.Writer, st)
}

func printStatus(w io.Writer, st adminapi.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s\n", orDash(st.Node, "-"))
	fmt.Fprintf(tw, "raft leader:\t%s\n", orDash(st.Leader, "(none known)"))
	fmt.Fprintf(tw, "raft term:\t%d\n", st.Term)
	fmt.Fprintf(tw, "voters:\t%s\n", orDash(strings.Join(st.Voters, ", "), "-"))
	fmt.Fprintf(tw, "non-voters:\t%s\n", orDash(strings.Join(st.Nonvoters, ", "), "-"))
	fmt.Fprintf(tw, "workers:\t%d\n", st.Workers)
	fmt.Fprintln(tw, "\nMEMBER\tADDRESS\tSTATE")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.Address, m.State)
	}
	fmt.Fprintln(tw, "\nPEER\tLAST LOAD REPORT")
	for _, p := range st.Peers {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, formatAge(p.LastReportAge))
	}
	return tw.Flush()
}

// formatAge renders a report age in seconds; negative means never.
func formatAge(seconds float64) string {
	if seconds < 0 {
		return "never"
	}
	return time.Duration(seconds*float64(time.Second)).Round(time.Millisecond).String() + " ago"
}

func healthcheck(c *cli.Context) error {
	client := oneShotClient(healthcheckTimeout)
	url := baseURL(c.String("addr")) + "/readiness"
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: GET %s: %s: %s", url, resp.Status, serverMessage(body))
	}
	return nil
}
