package raftnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/store"
)

// ApplyPath is where a follower forwards registry writes, on the leader's
// cluster port (link.Client, served by the wiring): POST a store.Command as JSON, get the applied
// Result back. The leader applies it locally and never forwards it again,
// so a write crosses at most one hop.
const ApplyPath = "/cluster/apply"

// forwardAttempts bounds the hops a write may take when leadership moves
// while it is being forwarded.
const forwardAttempts = 3

// ErrLeaderUnreachable: a follower knows who the leader is but cannot reach
// its cluster port (it just died, the network splits them, or it refuses
// this replica's certificate). Writes fail with 503 until a leader is
// reachable again.
var ErrLeaderUnreachable = errors.New("the raft leader's cluster port is unreachable")

// Forwarder applies registry writes through Raft on the leader and, on a
// follower, forwards them to the leader's cluster port, where mutual TLS
// (when the cluster has it) authenticates both ends and keeps the write
// private. Safe for concurrent use.
type Forwarder struct {
	raft *Node
	rpc  *link.Client
}

func NewForwarder(raft *Node, rpc *link.Client) *Forwarder {
	return &Forwarder{raft: raft, rpc: rpc}
}

// Apply commits cmd through the leader: here when this replica leads,
// forwarded otherwise. With no leader known it fails at once with
// ErrNoLeader; routing never calls it.
func (f *Forwarder) Apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	tried := ""
	for range forwardAttempts {
		res, err := f.raft.Apply(ctx, cmd)
		var nle *NotLeaderError
		if !errors.As(err, &nle) || nle.LeaderID == tried {
			return res, err
		}
		tried = nle.LeaderID
		res, err = f.Forward(ctx, nle, cmd)
		if !errors.Is(err, ErrNoLeader) {
			return res, err
		}
		// The leader we asked was no longer one: ask again whom this
		// replica now believes leads.
	}
	return store.Result{}, fmt.Errorf("%w: leadership kept moving while forwarding", ErrNoLeader)
}

// AppliedResult is the body of a successful POST /cluster/apply.
type AppliedResult struct {
	ID      store.WorkerID `json:"id"`
	Created bool           `json:"created"`
	Index   uint64         `json:"index"`
}

// Forward posts cmd to leader's cluster port once and decodes its answer.
func (f *Forwarder) Forward(ctx context.Context, leader *NotLeaderError, cmd store.Command) (store.Result, error) {
	body, err := cmd.Encode()
	if err != nil {
		return store.Result{}, err
	}
	status, data, err := f.rpc.CallHeard(ctx, http.MethodPost, leader.LeaderAddr, ApplyPath, body, link.ReachTimeout)
	if err != nil {
		return store.Result{}, fmt.Errorf("%w: %s at %s: %w", ErrLeaderUnreachable, leader.LeaderID, leader.LeaderAddr, err)
	}
	return decodeApplied(status, data, leader.LeaderID)
}

// decodeApplied turns the leader's answer back into a Result or an error
// that errorStatus maps to the leader's status, and that errors.Is matches
// against the sentinel the leader's error wrapped.
func decodeApplied(status int, data []byte, leader string) (store.Result, error) {
	if status == http.StatusOK {
		var a AppliedResult
		if err := json.Unmarshal(data, &a); err != nil {
			return store.Result{}, fmt.Errorf("leader %s: malformed answer: %w", leader, err)
		}
		return store.Result{ID: a.ID, Created: a.Created, Index: a.Index}, nil
	}
	var eb refusalBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Message == "" {
		eb.Error = refusalDetail{Message: fmt.Sprintf("status %d", status), Type: "server_error"}
	}
	fe := &ForwardedError{status: status, typ: eb.Error.Type, msg: eb.Error.Message, leader: leader}
	return store.Result{}, fe
}

// refusalBody is the part of the leader's OpenAI-style error body
// (adminapi.ErrorBody) a forwarded write's refusal is relayed from.
type refusalBody struct {
	Error refusalDetail `json:"error"`
}

type refusalDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}

// ForwardedError is the leader's refusal of a forwarded write, relayed as
// is: same status, type and message.
type ForwardedError struct {
	status int
	typ    string
	msg    string
	leader string
}

// HTTPStatus is the status the leader answered.
func (e *ForwardedError) HTTPStatus() int { return e.status }

// ErrorType is the OpenAI error type the leader answered.
func (e *ForwardedError) ErrorType() string { return e.typ }

func (e *ForwardedError) Error() string { return fmt.Sprintf("leader %s: %s", e.leader, e.msg) }

// Unwrap names the sentinel the leader's error type stands for, so callers
// branch on forwarded errors as on local ones.
func (e *ForwardedError) Unwrap() error {
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
