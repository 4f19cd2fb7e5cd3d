package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/store"
)

// Raft timing defaults (Timings, the --raft-*-timeout flags). The old
// values (500, 500, 250 and 20 ms) churned on a loaded 2-core host: a
// leader whose heartbeats were late by a quarter second stepped down, and
// followers that missed half a second of them started elections. These
// ride out a second of scheduling lag; a leader that dies is replaced within
// about HeartbeatTimeout + ElectionTimeout (2-4 s), a single node elects
// itself 1-2 s after start. Registry writes are rare, so the slower commit
// timeout costs nothing that matters.
const (
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = 2 * time.Second
	DefaultLeaderLeaseTimeout = time.Second
	DefaultCommitTimeout      = 50 * time.Millisecond
)

// Other Raft settings, without flags.
const (
	// The registry is tiny: snapshot often so restarts replay little log.
	raftSnapshotThreshold = 1024
	raftSnapshotInterval  = 30 * time.Second
	raftTrailingLogs      = 1024
	// transportTimeout bounds one RPC's network I/O (and a dial).
	transportTimeout = 3 * time.Second
	transportMaxPool = 3
	// DefaultApplyTimeout is Config.ApplyTimeout when unset.
	DefaultApplyTimeout = 5 * time.Second
)

// Errors of the Raft node. Match with errors.Is; *NotLeaderError with
// errors.As.
var (
	// ErrNoLeader: a write reached a node that knows no leader (an election
	// is under way, or the node has no quorum or is not yet bootstrapped).
	ErrNoLeader = errors.New("no raft leader is known")
	// ErrTimeout: the deadline passed before the write committed. Its
	// outcome is unknown: it may still commit.
	ErrTimeout = errors.New("raft operation timed out; outcome unknown")
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("raft node closed")
	// ErrAlreadyBootstrapped: BootstrapCluster on a node that holds state.
	ErrAlreadyBootstrapped = errors.New("raft node already holds state; not bootstrapping")
)

// NotLeaderError is returned for a write sent to a follower that knows who
// the leader is; forward the write to LeaderAddr (the leader's Raft address,
// LeaderID its node id).
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("not the raft leader; the leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// Config configures Open. NodeID, DataDir and BindAddr are required.
type Config struct {
	// NodeID names this replica in the Raft configuration (--node-name);
	// it must be stable across restarts and unique in the cluster.
	NodeID string
	// DataDir holds raft.db and the snapshots (--data-dir).
	DataDir string
	// BindAddr is the host:port the Raft transport listens on
	// (--raft-bind). Port 0 picks a free port (tests).
	BindAddr string
	// AdvertiseAddr is the host:port peers dial (--raft-advertise);
	// default: the bound address, which must then not be 0.0.0.0.
	AdvertiseAddr string
	// TLS, when set, makes every connection to and from this node's port
	// mutual TLS with the cluster CA (--cluster-tls-*).
	TLS link.TLSFiles
	// Bootstrap, when the data dir holds no Raft state, makes this node a
	// one-node cluster with itself as the only voter. Ignored on restart.
	Bootstrap bool
	// ApplyTimeout bounds every write and membership change; default
	// DefaultApplyTimeout (5 s).
	ApplyTimeout time.Duration
	// Timings are Raft's timeouts; zero fields take the defaults.
	Timings Timings
	// Logger receives Raft's logs; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.NodeID == "":
		return c, errors.New("raft: node id (--node-name) is required")
	case c.DataDir == "":
		return c, errors.New("raft: --data-dir is required")
	case c.BindAddr == "":
		return c, errors.New("raft: --raft-bind is required")
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = DefaultConfig().ApplyTimeout
	}
	c.Timings = c.Timings.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Timings are Raft's timeouts (the --raft-*-timeout flags).
type Timings struct {
	// Heartbeat is how long a follower goes without hearing from the
	// leader before it stands for election (randomised up to twice that).
	// Default DefaultHeartbeatTimeout.
	Heartbeat time.Duration
	// Election is how long a candidate waits for votes before it tries
	// again (randomised likewise). Default DefaultElectionTimeout.
	Election time.Duration
	// LeaderLease is how long a leader goes without a quorum's answers
	// before it steps down; at most Heartbeat. Default
	// DefaultLeaderLeaseTimeout.
	LeaderLease time.Duration
	// Commit is how long the leader waits before it sends entries it has
	// not batched yet. Default DefaultCommitTimeout.
	Commit time.Duration
}

// DefaultTimings are Raft's timeouts when the --raft-*-timeout flags leave
// them unset.
func DefaultTimings() Timings {
	return Timings{Heartbeat: DefaultHeartbeatTimeout, Election: DefaultElectionTimeout,
		LeaderLease: DefaultLeaderLeaseTimeout, Commit: DefaultCommitTimeout}
}

// DefaultConfig is the Config of every default: ApplyTimeout and Timings.
// NodeID, DataDir and BindAddr have none.
func DefaultConfig() Config {
	return Config{ApplyTimeout: DefaultApplyTimeout, Timings: DefaultTimings()}
}

func (t Timings) withDefaults() Timings {
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	def := DefaultTimings()
	return Timings{Heartbeat: or(t.Heartbeat, def.Heartbeat), Election: or(t.Election, def.Election),
		LeaderLease: or(t.LeaderLease, def.LeaderLease), Commit: or(t.Commit, def.Commit)}
}

// validate refuses timings Raft would refuse, naming the flag. Zero fields
// are the defaults.
func (t Timings) Validate() error {
	var errs []error
	for flag, d := range map[string]time.Duration{"raft-heartbeat-timeout": t.Heartbeat, "raft-election-timeout": t.Election,
		"raft-leader-lease-timeout": t.LeaderLease, "raft-commit-timeout": t.Commit} {
		if d < 0 || d > 0 && d < 5*time.Millisecond {
			errs = append(errs, flagErr(flag, "must be at least 5ms (got %v)", d))
		}
	}
	if d := t.withDefaults(); d.LeaderLease > d.Heartbeat {
		errs = append(errs, flagErr("raft-leader-lease-timeout", "must not exceed --raft-heartbeat-timeout (%v > %v)", d.LeaderLease, d.Heartbeat))
	}
	return errors.Join(errs...)
}

// Server is one member of the Raft configuration.
type Server struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Suffrage is "voter", "nonvoter" or "staging".
	Suffrage string `json:"suffrage"`
	// Leader is true for the member this node believes leads.
	Leader bool `json:"leader"`
}

// Status is a node's view of the Raft cluster, for /cluster/status.
type Status struct {
	NodeID string `json:"node_id"`
	Addr   string `json:"addr"`
	// State is "follower", "candidate", "leader" or "shutdown".
	State        string   `json:"state"`
	LeaderID     string   `json:"leader_id"`
	LeaderAddr   string   `json:"leader_addr"`
	Term         uint64   `json:"term"`
	LastIndex    uint64   `json:"last_index"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Servers      []Server `json:"servers"`
}

// Node is this replica's member of the Raft cluster that replicates the
// worker registry: a hashicorp/raft instance over TCP with bbolt stores,
// applying commands to a store.FSM. All methods are safe for concurrent use.
// Writes must go to the leader; reads come from the FSM, never from here.
type Node struct {
	cfg       Config
	raft      *raft.Raft
	fsm       *store.FSM
	stores    *store.Stores
	transport *raft.NetworkTransport
	// links is the cluster port the transport runs over, which also
	// carries the replicas' HTTP (forwarded writes, keyring changes).
	links *link.Port
	// lastAtOpen is the last index of the log on disk when the node opened.
	lastAtOpen uint64
	// leadership turns raft's observations into LeaderChanges.
	leadership *leadershipWatch

	// mu guards closed; waiters counts the goroutines awaiting raft
	// futures, which Close waits for.
	mu        sync.Mutex
	closed    bool
	waiters   sync.WaitGroup
	stop      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens the stores under cfg.DataDir, starts the TCP transport and
// the Raft node applying to fsm, and bootstraps a one-node cluster when
// cfg.Bootstrap is set and the data dir is new. A restart recovers the
// registry from the snapshot and the log once a leader commits (for a
// one-node cluster, after it elects itself). Close releases everything.
func Open(cfg Config, fsm *store.FSM) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	stores, err := store.OpenStores(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, fsm: fsm, stores: stores, leadership: newLeadershipWatch(), stop: make(chan struct{})}
	if err := n.start(); err != nil {
		return nil, errors.Join(err, n.closeParts())
	}
	return n, nil
}

func (n *Node) start() error {
	var err error
	if n.transport, n.links, err = newTransport(n.cfg); err != nil {
		return err
	}
	boot := bootstrap{cfg: n.cfg, stores: n.stores, transport: n.transport}
	conf := boot.raftConfig()
	if n.cfg.Bootstrap {
		if err := boot.ifNew(conf); err != nil {
			return err
		}
		if err := boot.adoptIfRenamed(conf); err != nil {
			return err
		}
	}
	if n.lastAtOpen, err = n.stores.Log.LastIndex(); err != nil {
		return fmt.Errorf("raft: reading the log: %w", err)
	}
	held := heldTransport{NetworkTransport: n.transport, port: n.links}
	n.raft, err = raft.NewRaft(conf, n.fsm, n.stores.Log, n.stores.Stable, n.stores.Snapshots, held)
	if err != nil {
		return fmt.Errorf("raft: start: %w", n.fsm.StartError(err))
	}
	n.leadership.watch(n.raft, n.stop, &n.waiters)
	return nil
}

// newTransport opens the cluster port on --raft-bind (with the cluster TLS,
// if any) and runs Raft's network transport over it.
func newTransport(cfg Config) (*raft.NetworkTransport, *link.Port, error) {
	advertise, err := advertiseAddr(cfg)
	if err != nil {
		return nil, nil, err
	}
	t, err := link.LoadTLS(cfg.TLS)
	if err != nil {
		return nil, nil, err
	}
	port, err := link.Open(cfg.BindAddr, advertise, t, cfg.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("raft: listen on --raft-bind %q: %w", cfg.BindAddr, err)
	}
	transport := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  port.RaftLayer(),
		Logger:  newHclogAdapter(cfg.Logger, "raft-net"),
		MaxPool: transportMaxPool,
		Timeout: transportTimeout,
	})
	return transport, port, nil
}

// advertiseAddr resolves --raft-advertise; nil means "the bound address",
// which peers cannot dial when it is a wildcard.
func advertiseAddr(cfg Config) (net.Addr, error) {
	if cfg.AdvertiseAddr == "" {
		host, _, err := net.SplitHostPort(cfg.BindAddr)
		if ip := net.ParseIP(host); err == nil && (host == "" || ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("raft: --raft-bind %q is a wildcard address; set --raft-advertise", cfg.BindAddr)
		}
		return nil, nil
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr)
	if err != nil {
		return nil, fmt.Errorf("raft: --raft-advertise %q: %w", cfg.AdvertiseAddr, err)
	}
	if addr.IP == nil || addr.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft: --raft-advertise %q is not an address peers can dial", cfg.AdvertiseAddr)
	}
	if host, _, _ := net.SplitHostPort(cfg.AdvertiseAddr); net.ParseIP(host) == nil {
		// A name stays a name in the Raft configuration, resolved at every
		// dial: a replica that restarts at another IP (a rescheduled
		// container) keeps its address, and two that swap IPs never hold
		// each other's.
		return namedAddr(cfg.AdvertiseAddr), nil
	}
	return addr, nil
}

// namedAddr is a host:port whose host is a DNS name.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

// BootstrapCluster makes voters the initial configuration of a node that
// holds no state (the --bootstrap-expect path: every expected replica calls
// it with the same list once all have been discovered). A node with state
// returns ErrAlreadyBootstrapped. voters must include this node.
func (n *Node) BootstrapCluster(ctx context.Context, voters []Server) error {
	servers := make([]raft.Server, len(voters))
	for i, v := range voters {
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.Addr)}
	}
	err := n.await(ctx, n.raft.BootstrapCluster(raft.Configuration{Servers: servers}))
	if errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("%w: %w", ErrAlreadyBootstrapped, err)
	}
	return err
}

// Apply replicates cmd and returns the FSM's result once the command is
// committed and applied on this node (the leader). The error is the
// validation error of cmd, *NotLeaderError or ErrNoLeader on a node that is
// not the leader, ErrTimeout after ApplyTimeout or ctx's deadline, ErrClosed,
// or, when the command was applied but refused, Result.Err (ErrConflict,
// ErrUnknownWorker, ...). Never blocks past ctx or ApplyTimeout.
func (n *Node) Apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	data, err := cmd.Encode()
	if err != nil {
		return store.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	f := n.raft.Apply(data, remaining(ctx))
	if err := n.await(ctx, f); err != nil {
		return store.Result{}, err
	}
	res, ok := f.Response().(store.Result)
	if !ok {
		return store.Result{}, fmt.Errorf("raft: unexpected apply response %T", f.Response())
	}
	return res, res.Err
}

// remaining is the time left before ctx's deadline (at least 1ms, since 0
// means "no timeout" to raft).
func remaining(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d), time.Millisecond)
}

// await waits for f bounded by ctx and ApplyTimeout and maps raft's errors
// to ours. The waiting goroutine is counted in n.waiters: it ends when raft
// resolves the future, which raft guarantees by Shutdown at the latest.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if !n.addWaiter() {
		return ErrClosed
	}
	done := make(chan error, 1)
	go func() {
		defer n.waiters.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return n.mapError(err)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
		return ctx.Err()
	}
}

func (n *Node) addWaiter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.waiters.Add(1)
	return true
}

func (n *Node) mapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", n.notLeader(), err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return fmt.Errorf("raft: %w", err)
}

// notLeader is the error for a write this node cannot take: who to ask
// instead, if anyone is known.
func (n *Node) notLeader() error {
	id, addr := n.Leader()
	if addr == "" || id == n.cfg.NodeID {
		return ErrNoLeader
	}
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// Barrier waits until every write committed before it has been applied to
// this node's FSM (leader only): after it, the registry is current.
func (n *Node) Barrier(ctx context.Context) error {
	return n.await(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
}

// Snapshot makes Raft snapshot the FSM now and compact the log.
func (n *Node) Snapshot(ctx context.Context) error {
	return n.await(ctx, n.raft.Snapshot())
}

// AddVoter adds (or promotes) a voting member. Leader only.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	f := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
	return n.await(ctx, f)
}

// AddNonvoter adds a member that receives the log but does not vote, so
// the tier can grow without growing the quorum. Leader only.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	f := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
	return n.await(ctx, f)
}

// RemoveServer removes a member. Leader only.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	return n.await(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout))
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Addr is the address peers reach this node's transport at.
func (n *Node) Addr() string { return string(n.transport.LocalAddr()) }

// IsLeader reports whether this node is the leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the id and address of the leader this node knows, or two
// empty strings when it knows none.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// CaughtUp reports whether this node knows a leader and has applied every
// entry it knows to be committed: its registry is then the cluster's.
func (n *Node) CaughtUp() bool {
	_, id := n.raft.LeaderWithID()
	commit := n.raft.CommitIndex()
	return id != "" && commit > 0 && n.raft.AppliedIndex() >= commit
}

// Replayed reports whether this node has applied the whole log it had on
// disk when it opened, and had one: a restarted replica then has its last
// registry, leader or none.
func (n *Node) Replayed() bool {
	return n.lastAtOpen > 0 && n.raft.AppliedIndex() >= n.lastAtOpen
}

// Term is the current Raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// Servers returns the members of the latest Raft configuration.
func (n *Node) Servers(ctx context.Context) ([]Server, error) {
	f := n.raft.GetConfiguration()
	if err := n.await(ctx, f); err != nil {
		return nil, err
	}
	_, leaderID := n.raft.LeaderWithID()
	var out []Server
	for _, s := range f.Configuration().Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address),
			Suffrage: strings.ToLower(s.Suffrage.String()), Leader: s.ID == leaderID})
	}
	return out, nil
}

// Status returns this node's view of the cluster.
func (n *Node) Status(ctx context.Context) (Status, error) {
	servers, err := n.Servers(ctx)
	leaderID, leaderAddr := n.Leader()
	return Status{
		NodeID: n.cfg.NodeID, Addr: n.Addr(), State: strings.ToLower(n.raft.State().String()),
		LeaderID: leaderID, LeaderAddr: leaderAddr, Term: n.raft.CurrentTerm(),
		LastIndex: n.raft.LastIndex(), CommitIndex: n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(), Servers: servers,
	}, err
}

// LeaderChanges returns a channel closed at the next change of the known
// leader or of this node's Raft state. Call it again after it fires, then
// read IsLeader or Leader: changes coalesce. Safe from any goroutine.
func (n *Node) LeaderChanges() <-chan struct{} { return n.leadership.changes() }

// WaitForLeader blocks until this node knows a leader (possibly itself) and
// returns it, or returns ctx's error.
func (n *Node) WaitForLeader(ctx context.Context) (id, addr string, err error) {
	for {
		changed := n.LeaderChanges() // before the check: no change is missed
		if id, addr = n.Leader(); addr != "" {
			return id, addr, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-n.stop:
			return "", "", ErrClosed
		}
	}
}

// Close shuts the node down: Raft (ending its goroutines and resolving
// pending writes with ErrClosed), the observer, the transport and the
// stores. It does not hand leadership over first; a leader's peers elect a
// new one within about a second. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		var err error
		if n.links != nil {
			n.links.StopHolding() // or Shutdown waits on Raft's held dials and RPCs
		}
		if n.raft != nil {
			err = n.raft.Shutdown().Error()
			n.leadership.unwatch(n.raft)
		}
		close(n.stop)
		n.waiters.Wait()
		n.closeErr = errors.Join(err, n.closeParts())
	})
	return n.closeErr
}

// closeParts closes the transport and the stores, whichever are open.
func (n *Node) closeParts() error {
	var err error
	if n.transport != nil {
		n.transport.CloseStreams()
		err = n.transport.Close()
	}
	return errors.Join(err, n.stores.Close())
}

// flagErr is a configuration error naming the flag at fault, of the type
// the replica's other configuration errors are.
func flagErr(flag, format string, args ...any) error {
	return &link.FlagError{Flag: flag, Msg: fmt.Sprintf(format, args...)}
}

// Port is the cluster port the transport runs over, which also carries the
// replicas' HTTP (forwarded writes, keyring changes).
func (n *Node) Port() *link.Port { return n.links }

// LastLog is the index and term of the last entry of this node's log.
func (n *Node) LastLog() (index, term uint64, err error) {
	index = n.raft.LastIndex()
	var l raft.Log
	if err := n.stores.Log.GetLog(index, &l); err != nil {
		return index, 0, fmt.Errorf("raft: reading log entry %d: %w", index, err)
	}
	return index, l.Term, nil
}

// LastIndex is the index of the last entry of this node's log.
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }
