package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/loadsync"
)

// keyringPath is the cluster-port endpoint that changes (or lists) one
// replica's own keyring: POST admin.KeyringRequest, answer
// adminapi.NodeKeyring.
const keyringPath = "/cluster/keyring/local"

// keyringFanout applies a keyring step to this replica's gossip keyring
// and, over the cluster port, to every live peer's; it also answers a
// peer's step (serveLocal). Safe for concurrent use.
type keyringFanout struct {
	node   string
	gossip func() *loadsync.Gossip
	rpc    *link.Client
	log    *slog.Logger
}

// everywhere applies op to this replica's keyring and, in parallel,
// to every live peer's, and returns each replica's answer sorted by name.
// A replica without a keyring refuses before asking anyone.
func (k keyringFanout) everywhere(ctx context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error) {
	if _, err := k.gossip().Keyring(); err != nil {
		return nil, admin.Refusal(http.StatusConflict, "conflict_error", err.Error())
	}
	members := k.gossip().Members()
	out := make([]adminapi.NodeKeyring, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Self {
				out[i] = k.local(op, key)
			} else {
				out[i] = k.peer(ctx, m, op, key)
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b adminapi.NodeKeyring) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// local applies op to this replica's keyring.
func (k keyringFanout) local(op adminapi.KeyringOp, key []byte) adminapi.NodeKeyring {
	n := adminapi.NodeKeyring{Node: k.node}
	var err error
	switch op {
	case adminapi.KeyringList:
	case adminapi.KeyringInstall:
		err = k.gossip().InstallKey(key)
	case adminapi.KeyringUse:
		err = k.gossip().UseKey(key)
	case adminapi.KeyringRemove:
		err = k.gossip().RemoveKey(key)
	default:
		err = fmt.Errorf("unknown keyring operation %q", op)
	}
	if err == nil && op != adminapi.KeyringList {
		k.log.Info("gossip keyring changed", "op", op, "key", admin.KeyFingerprint(key))
	}
	kr, listErr := k.gossip().Keyring()
	if err == nil {
		err = listErr
	}
	if err != nil {
		n.Error = err.Error()
	}
	n.Primary = fingerprintOrEmpty(kr.Primary)
	for _, k := range kr.Keys {
		n.Keys = append(n.Keys, admin.KeyFingerprint(k))
	}
	return n
}

func fingerprintOrEmpty(key []byte) string {
	if key == nil {
		return ""
	}
	return admin.KeyFingerprint(key)
}

// peer asks member m to apply op over its cluster port.
func (k keyringFanout) peer(ctx context.Context, m loadsync.Member, op adminapi.KeyringOp, key []byte) adminapi.NodeKeyring {
	failed := func(err error) adminapi.NodeKeyring { return adminapi.NodeKeyring{Node: m.Name, Error: err.Error()} }
	addr := m.Tags[tagRaft]
	if addr == "" {
		return failed(errors.New("announces no cluster port"))
	}
	body, _ := json.Marshal(admin.KeyringRequest{Op: op, Key: base64.StdEncoding.EncodeToString(key)})
	status, data, err := k.rpc.Call(ctx, http.MethodPost, addr, keyringPath, body)
	if err != nil {
		return failed(fmt.Errorf("unreachable at %s: %w", addr, err))
	}
	var n adminapi.NodeKeyring
	if err := json.Unmarshal(data, &n); err != nil || status != http.StatusOK {
		return failed(fmt.Errorf("answered %d: %s", status, bytes.TrimSpace(data)))
	}
	return n
}

// serveLocal is keyringPath on the cluster port: a peer relays one
// step of a rotation to this replica.
func (k keyringFanout) serveLocal(ctx *fasthttp.RequestCtx) {
	var req admin.KeyringRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
		admin.WriteError(ctx, admin.BadJSON(err))
		return
	}
	var key []byte
	if req.Op != adminapi.KeyringList {
		var err error
		if key, err = admin.ParseGossipKey(req.Key); err != nil {
			admin.WriteError(ctx, err)
			return
		}
	}
	admin.WriteJSON(ctx, http.StatusOK, k.local(req.Op, key))
}
