package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// Gossip key rotation without a restart, as Consul does it: through any
// replica's admin API, each step applied to every live replica at once.
//
//	POST /cluster/keyring/install {"key": NEW}   every replica accepts NEW
//	POST /cluster/keyring/use     {"key": NEW}   every replica sends with NEW
//	POST /cluster/keyring/remove  {"key": OLD}   OLD is no longer accepted
//	GET  /cluster/keyring                        each replica's keys
//
// The replica that takes the request changes its own keyring and asks each
// live peer to change its own over the cluster port (keyringPath), where
// mutual TLS keeps the key private. Keys are shown only as fingerprints.

// keyringPath is the cluster-port endpoint that changes (or lists) one
// replica's own keyring: POST keyringRequest, answer adminapi.NodeKeyring.
const keyringPath = "/cluster/keyring/local"

// KeyFingerprint names a gossip key without revealing it: the first 8
// bytes of its SHA-256, in hex. `printf %s "$KEY" | base64 -d | sha256sum`
// starts with the same 16 digits.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// keyringRequest is the body of the keyring endpoints.
type keyringRequest struct {
	Op  adminapi.KeyringOp `json:"op,omitempty"` // the cluster port's only
	Key string             `json:"key"`
}

// keyringAdminOps maps the admin paths to their operation.
var keyringAdminOps = map[string]adminapi.KeyringOp{
	"/cluster/keyring/install": adminapi.KeyringInstall,
	"/cluster/keyring/use":     adminapi.KeyringUse,
	"/cluster/keyring/remove":  adminapi.KeyringRemove,
}

func (a *Admin) listKeyring(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	a.runKeyring(ctx, adminapi.KeyringList, nil)
}

func (a *Admin) changeKeyring(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	op := keyringAdminOps[string(ctx.Path())]
	key, err := decodeKeyringKey(ctx.PostBody())
	if err != nil {
		writeError(ctx, err)
		return
	}
	a.runKeyring(ctx, op, key)
}

// decodeKeyringKey reads {"key": base64} and checks it is an AES key.
func decodeKeyringKey(body []byte) ([]byte, error) {
	var req keyringRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, err
	}
	return parseGossipKey(req.Key)
}

func parseGossipKey(text string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(key) != 16 && len(key) != 24 && len(key) != 32 {
		return nil, &statusError{http.StatusBadRequest, "invalid_request_error",
			"key: want the base64 of a 16, 24 or 32 byte AES key"}
	}
	return key, nil
}

// runKeyring applies op everywhere and answers 200 with every replica's
// keyring, or 502 naming the replicas where it failed (with the keyrings
// of all, so the operator sees where each one stands).
func (a *Admin) runKeyring(ctx *fasthttp.RequestCtx, op adminapi.KeyringOp, key []byte) {
	if a.cfg.Keyring == nil {
		writeError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica has no gossip keyring"})
		return
	}
	apply, cancel := context.WithTimeout(context.Background(), a.cfg.ApplyTimeout)
	defer cancel()
	nodes, err := a.cfg.Keyring(apply, op, key)
	if err != nil {
		writeError(ctx, err)
		return
	}
	var failed []string
	for _, n := range nodes {
		if n.Error != "" {
			failed = append(failed, n.Node+": "+n.Error)
		}
	}
	if len(failed) == 0 {
		writeJSON(ctx, http.StatusOK, map[string][]adminapi.NodeKeyring{"nodes": nodes})
		return
	}
	msg := fmt.Sprintf("keyring %s failed on %d of %d replicas: %s", op, len(failed), len(nodes), strings.Join(failed, "; "))
	writeJSON(ctx, http.StatusBadGateway, struct {
		Error adminapi.ErrorDetail   `json:"error"`
		Nodes []adminapi.NodeKeyring `json:"nodes"`
	}{adminapi.ErrorDetail{Message: msg, Type: "server_error", Code: http.StatusBadGateway}, nodes})
}

// keyringEverywhere applies op to this replica's keyring and, in parallel,
// to every live peer's, and returns each replica's answer sorted by name.
// A replica without a keyring refuses before asking anyone.
func (r *Replica) keyringEverywhere(ctx context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error) {
	if _, err := r.gossiper().Keyring(); err != nil {
		return nil, &statusError{http.StatusConflict, "conflict_error", err.Error()}
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
		r.log.Info("gossip keyring changed", "op", op, "key", KeyFingerprint(key))
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
		n.Keys = append(n.Keys, KeyFingerprint(k))
	}
	return n
}

func fingerprintOrEmpty(key []byte) string {
	if key == nil {
		return ""
	}
	return KeyFingerprint(key)
}

// peerKeyring asks member m to apply op over its cluster port.
func (r *Replica) peerKeyring(ctx context.Context, m loadsync.Member, op adminapi.KeyringOp, key []byte) adminapi.NodeKeyring {
	failed := func(err error) adminapi.NodeKeyring { return adminapi.NodeKeyring{Node: m.Name, Error: err.Error()} }
	addr := m.Tags[tagRaft]
	if addr == "" {
		return failed(errors.New("announces no cluster port"))
	}
	body, _ := json.Marshal(keyringRequest{Op: op, Key: base64.StdEncoding.EncodeToString(key)})
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
	var req keyringRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
		writeError(ctx, badJSON(err))
		return
	}
	var key []byte
	if req.Op != adminapi.KeyringList {
		var err error
		if key, err = parseGossipKey(req.Key); err != nil {
			writeError(ctx, err)
			return
		}
	}
	writeJSON(ctx, http.StatusOK, r.localKeyring(req.Op, key))
}
