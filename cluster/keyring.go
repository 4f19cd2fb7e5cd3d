package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/loadsync"
)

// keyringPath is the cluster-port endpoint that changes (or lists) one
// replica's own keyring: POST admin.KeyringRequest, answer
// adminapi.NodeKeyring.
const keyringPath = "/cluster/keyring/local"

// keyringEverywhere applies op to this replica's keyring and, in parallel,
// to every live peer's, and returns each replica's answer sorted by name.
// A replica without a keyring refuses before asking anyone.
func (r *Replica) keyringEverywhere(ctx context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error) {
	if _, err := r.gossiper().Keyring(); err != nil {
		return nil, admin.Refusal(http.StatusConflict, "conflict_error", err.Error())
	}
	members := r.gossiper().Members()
	out := make([]adminapi.NodeKeyring, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Self {
				out[i] = r.localKeyring(op, key)
			} else {
				out[i] = r.peerKeyring(ctx, m, op, key)
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b adminapi.NodeKeyring) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// localKeyring applies op to this replica's keyring.
func (r *Replica) localKeyring(op adminapi.KeyringOp, key []byte) adminapi.NodeKeyring {
	n := adminapi.NodeKeyring{Node: r.cfg.NodeName}
	var err error
	switch op {
	case adminapi.KeyringList:
	case adminapi.KeyringInstall:
		err = r.gossiper().InstallKey(key)
	case adminapi.KeyringUse:
		err = r.gossiper().UseKey(key)
	case adminapi.KeyringRemove:
		err = r.gossiper().RemoveKey(key)
	default:
		err = fmt.Errorf("unknown keyring operation %q", op)
	}
	if err == nil && op != adminapi.KeyringList {
		r.log.Info("gossip keyring changed", "op", op, "key", admin.KeyFingerprint(key))
	}
	kr, listErr := r.gossiper().Keyring()
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

// peerKeyring asks member m to apply op over its cluster port.
func (r *Replica) peerKeyring(ctx context.Context, m loadsync.Member, op adminapi.KeyringOp, key []byte) adminapi.NodeKeyring {
	failed := func(err error) adminapi.NodeKeyring { return adminapi.NodeKeyring{Node: m.Name, Error: err.Error()} }
	addr := m.Tags[tagRaft]
	if addr == "" {
		return failed(errors.New("announces no cluster port"))
	}
	body, _ := json.Marshal(admin.KeyringRequest{Op: op, Key: base64.StdEncoding.EncodeToString(key)})
	status, data, err := r.rpc.Call(ctx, http.MethodPost, addr, keyringPath, body)
	if err != nil {
		return failed(fmt.Errorf("unreachable at %s: %w", addr, err))
	}
	var n adminapi.NodeKeyring
	if err := json.Unmarshal(data, &n); err != nil || status != http.StatusOK {
		return failed(fmt.Errorf("answered %d: %s", status, bytes.TrimSpace(data)))
	}
	return n
}

// serveLocalKeyring is keyringPath on the cluster port: a peer relays one
// step of a rotation to this replica.
func (r *Replica) serveLocalKeyring(ctx *fasthttp.RequestCtx) {
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
	admin.WriteJSON(ctx, http.StatusOK, r.localKeyring(req.Op, key))
}
