package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// certDir writes a cluster CA and certificates for nodes into a fresh
// directory, as `router tls init DIR NODE...` does, and returns it.
func certDir(t *testing.T, nodes ...string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := link.WriteCerts(dir, nodes, link.CertOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withTLS gives each replica the certificate of its node name from dir.
func withTLS(dir string) clusterOptions {
	return func(cfg *Config) { cfg.ClusterTLS = link.NodeTLSFiles(dir, cfg.NodeName) }
}

// withKey gives each replica the gossip key.
func withKey(key []byte) clusterOptions {
	return func(cfg *Config) { cfg.GossipKey = key }
}

// presenting is a TLS client configuration that presents the certificate
// of files (none when files is zero) and accepts any server, as an
// attacker would.
func presenting(t *testing.T, files link.TLSFiles) *tls.Config {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if files.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// intruder is a client of a cluster port that is not a replica: plain TCP
// or TLS with a certificate of its choice, announcing a link kind (or none,
// as hashicorp/raft's own TCP transport would).
type intruder struct {
	tls  *tls.Config // nil: plain TCP
	link int         // the link byte, or -1 for none
}

func (in intruder) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if in.tls != nil {
		tc := tls.Client(conn, in.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	if in.link >= 0 {
		if _, err := conn.Write([]byte{byte(in.link)}); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// intruders are the ways a stranger tries the cluster port of a replica
// with cluster TLS. otherCA holds a certificate of another CA, named
// "intruder".
func intruders(t *testing.T, otherCA string, kind byte) map[string]intruder {
	return map[string]intruder{
		"plain TCP announcing the link":     {link: int(kind)},
		"TLS without a client certificate":  {tls: presenting(t, link.TLSFiles{}), link: int(kind)},
		"TLS with another CA's certificate": {tls: presenting(t, link.NodeTLSFiles(otherCA, "intruder")), link: int(kind)},
	}
}

// raftClient is a hashicorp/raft network transport that dials like in:
// the tool that forges Raft RPCs.
func raftClient(t *testing.T, in intruder) *raft.NetworkTransport {
	layer := &intruderLayer{in: in, closed: make(chan struct{})}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 1,
		Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { tr.Close() })
	return tr
}

// intruderLayer is a raft.StreamLayer that only dials.
type intruderLayer struct {
	in     intruder
	closed chan struct{}
	once   sync.Once
}

func (l *intruderLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.in.dial(ctx, string(addr))
}

func (l *intruderLayer) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *intruderLayer) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *intruderLayer) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// forgedAppendEntries is what took over a replica before cluster TLS: a
// higher term and one AddWorker entry right after the victim's last one,
// committed at once.
func forgedAppendEntries(t *testing.T, victim *Replica, url string) *raft.AppendEntriesRequest {
	t.Helper()
	data, err := store.NewAddWorker(store.AddWorker{URL: url}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	last, prevTerm, err := victim.raft.LastLog()
	if err != nil {
		t.Fatal(err)
	}
	term := victim.raft.Term() + 10
	return &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
		Term:         term,
		PrevLogEntry: last, PrevLogTerm: prevTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last + 1,
	}
}

// forgedSnapshot is an InstallSnapshot whose registry holds only the
// attacker's worker, far ahead of the victim's log.
func forgedSnapshot(t *testing.T, victim *Replica, url string) (*raft.InstallSnapshotRequest, []byte) {
	t.Helper()
	fsm := store.NewFSM()
	data, err := store.NewAddWorker(store.AddWorker{URL: url}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data})
	snap, err := fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufferSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	term := victim.raft.Term() + 10
	index := victim.raft.LastIndex() + 100
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(victim.cfg.NodeName),
		Address: raft.ServerAddress(victim.RaftAddr())}}}
	return &raft.InstallSnapshotRequest{
		RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
		SnapshotVersion: raft.SnapshotVersionMax,
		Term:            term, LastLogIndex: index, LastLogTerm: term,
		Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: 1,
		Size: int64(sink.Len()),
	}, sink.Bytes()
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) ID() string    { return "forged" }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) Close() error  { return nil }

// forwardedWrite posts a registry write to a cluster port as a follower
// would, dialling like in, and returns the status (0 when the connection
// failed).
func forwardedWrite(t *testing.T, addr string, in intruder, url string) int {
	t.Helper()
	body, err := store.NewAddWorker(store.AddWorker{URL: url}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return postThrough(t, addr, in, raftnode.ApplyPath, body)
}

// postThrough POSTs body to path on the cluster port at addr, connecting as
// in does, and returns the answer's status: 0 when the connection was
// refused before an answer.
func postThrough(t *testing.T, addr string, in intruder, path string, body []byte) int {
	t.Helper()
	client := &http.Client{Timeout: testDeadline, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return in.dial(ctx, addr) }}}
	resp, err := client.Post("http://"+addr+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// registryHolds reports whether r's registry has a worker at url.
func registryHolds(r *Replica, url string) bool {
	norm, _ := store.NormalizeURL(url)
	_, ok := r.fsm.View().WorkerByURL(norm)
	return ok
}

// waitRefusals waits until r's cluster port has refused more than before.
func waitRefusals(t *testing.T, r *Replica, before uint64) {
	t.Helper()
	testwait.Eventually(t, testDeadline, func() bool { return r.raft.Port().Refused() > before }, "the cluster port refuses the connection")
}

// jsonBody marshals v for a request body.
func jsonBody(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
