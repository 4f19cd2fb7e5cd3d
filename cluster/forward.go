package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/store"
)

// applyPath is the admin endpoint a follower forwards registry writes to:
// POST a store.Command as JSON, get the applied Result back. The leader
// applies it locally and never forwards it again, so a write crosses at most
// one hop.
const applyPath = "/cluster/apply"

// forwardAttempts bounds the hops a write may take when leadership moves
// while it is being forwarded.
const forwardAttempts = 3

// maxForwardResponse bounds the leader's answer to a forwarded write.
const maxForwardResponse = 64 << 10

// ErrLeaderUnreachable: a follower knows who the leader is but cannot reach
// its admin API (it just died, or the network splits them). Writes fail with
// 503 until a leader is reachable again.
var ErrLeaderUnreachable = errors.New("the raft leader's admin API is unreachable")

// forwarder applies registry writes through Raft on the leader and, on a
// follower, forwards them to the leader's admin API with the admin token.
// Safe for concurrent use.
type forwarder struct {
	raft   *RaftNode
	token  string
	apiOf  func(node string) (string, bool) // a replica's HTTP API address, from the gossip
	client *http.Client
}

func newForwarder(raft *RaftNode, token string, apiOf func(string) (string, bool)) *forwarder {
	transport := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
		ResponseHeaderTimeout: DefaultAdminApplyTimeout}
	return &forwarder{raft: raft, token: token, apiOf: apiOf, client: &http.Client{Transport: transport}}
}

// Apply commits cmd through the leader: here when this replica leads,
// forwarded otherwise. With no leader known it fails at once with
// ErrNoLeader; routing never calls it.
func (f *forwarder) Apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	tried := ""
	for range forwardAttempts {
		res, err := f.raft.Apply(ctx, cmd)
		var nle *NotLeaderError
		if !errors.As(err, &nle) || nle.LeaderID == tried {
			return res, err
		}
		tried = nle.LeaderID
		res, err = f.forward(ctx, nle.LeaderID, cmd)
		if !errors.Is(err, ErrNoLeader) {
			return res, err
		}
		// The leader we asked was no longer one: ask again whom this
		// replica now believes leads.
	}
	return store.Result{}, fmt.Errorf("%w: leadership kept moving while forwarding", ErrNoLeader)
}

// appliedResult is the body of a successful POST /cluster/apply.
type appliedResult struct {
	ID      store.WorkerID `json:"id"`
	Created bool           `json:"created"`
	Index   uint64         `json:"index"`
}

// forward posts cmd to leader's admin API and decodes its answer.
func (f *forwarder) forward(ctx context.Context, leader string, cmd store.Command) (store.Result, error) {
	addr, ok := f.apiOf(leader)
	if !ok {
		return store.Result{}, fmt.Errorf("%w: leader %s is not a gossip member yet", ErrNoLeader, leader)
	}
	body, err := cmd.Encode()
	if err != nil {
		return store.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+applyPath, bytes.NewReader(body))
	if err != nil {
		return store.Result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return store.Result{}, fmt.Errorf("%w: %s at %s: %w", ErrLeaderUnreachable, leader, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardResponse))
	if err != nil {
		return store.Result{}, fmt.Errorf("%w: %s at %s: reading the answer: %w", ErrLeaderUnreachable, leader, addr, err)
	}
	return decodeApplied(resp.StatusCode, data, leader)
}

// decodeApplied turns the leader's answer back into a Result or an error
// that errorStatus maps to the leader's status, and that errors.Is matches
// against the sentinel the leader's error wrapped.
func decodeApplied(status int, data []byte, leader string) (store.Result, error) {
	if status == http.StatusOK {
		var a appliedResult
		if err := json.Unmarshal(data, &a); err != nil {
			return store.Result{}, fmt.Errorf("leader %s: malformed answer: %w", leader, err)
		}
		return store.Result{ID: a.ID, Created: a.Created, Index: a.Index}, nil
	}
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Message == "" {
		eb.Error = errorDetail{Message: fmt.Sprintf("status %d", status), Type: "server_error"}
	}
	fe := &forwardedError{status: status, typ: eb.Error.Type, msg: eb.Error.Message, leader: leader}
	return store.Result{}, fe
}

// forwardedError is the leader's refusal of a forwarded write, relayed as
// is: same status, type and message.
type forwardedError struct {
	status int
	typ    string
	msg    string
	leader string
}

func (e *forwardedError) Error() string { return fmt.Sprintf("leader %s: %s", e.leader, e.msg) }

// Unwrap names the sentinel the leader's error type stands for, so callers
// branch on forwarded errors as on local ones.
func (e *forwardedError) Unwrap() error {
	switch e.typ {
	case "invalid_request_error":
		return store.ErrInvalid
	case "not_found_error":
		return store.ErrUnknownWorker
	case "conflict_error":
		return store.ErrConflict
	case "timeout_error":
		return ErrTimeout
	case "service_unavailable_error":
		return ErrNoLeader
	}
	return nil
}

// close drops the idle connections to the leaders.
func (f *forwarder) close() { f.client.CloseIdleConnections() }
