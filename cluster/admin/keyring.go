package admin

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
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
// live peer to change its own over the cluster port (Config.Keyring), where
// mutual TLS keeps the key private. Keys are shown only as fingerprints.

// KeyFingerprint names a gossip key without revealing it: the first 8
// bytes of its SHA-256, in hex. `printf %s "$KEY" | base64 -d | sha256sum`
// starts with the same 16 digits.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyringRequest is the body of the keyring endpoints, and of the peer
// step on the cluster port, which alone names Op.
type KeyringRequest struct {
	Op  adminapi.KeyringOp `json:"op,omitempty"` // the cluster port's only
	Key string             `json:"key"`
}

// keyringAdminOps maps the admin paths to their operation.
var keyringAdminOps = map[string]adminapi.KeyringOp{
	"/cluster/keyring/install": adminapi.KeyringInstall,
	"/cluster/keyring/use":     adminapi.KeyringUse,
	"/cluster/keyring/remove":  adminapi.KeyringRemove,
}

// keyringEndpoints serve the keyring endpoints: keyring is Config.Keyring,
// each call bounded by timeout (Config.ApplyTimeout).
type keyringEndpoints struct {
	keyring func(ctx context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error)
	timeout time.Duration
}

// keyringRoute is the admin handler of a keyring endpoint.
func keyringRoute(serve func(*keyringEndpoints, *fasthttp.RequestCtx)) handler {
	return func(a *Admin, ctx *fasthttp.RequestCtx, _ store.WorkerID) { serve(&a.keyring, ctx) }
}

func (k *keyringEndpoints) list(ctx *fasthttp.RequestCtx) {
	k.run(ctx, adminapi.KeyringList, nil)
}

func (k *keyringEndpoints) change(ctx *fasthttp.RequestCtx) {
	op := keyringAdminOps[string(ctx.Path())]
	key, err := decodeKeyringKey(ctx.PostBody())
	if err != nil {
		WriteError(ctx, err)
		return
	}
	k.run(ctx, op, key)
}

// decodeKeyringKey reads {"key": base64} and checks it is an AES key.
func decodeKeyringKey(body []byte) ([]byte, error) {
	var req KeyringRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, err
	}
	return ParseGossipKey(req.Key)
}

// ParseGossipKey decodes a base64 gossip key, a 400 unless it is an AES
// key of 16, 24 or 32 bytes.
func ParseGossipKey(text string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(key) != 16 && len(key) != 24 && len(key) != 32 {
		return nil, &statusError{http.StatusBadRequest, "invalid_request_error",
			"key: want the base64 of a 16, 24 or 32 byte AES key"}
	}
	return key, nil
}

// run applies op everywhere and answers 200 with every replica's
// keyring, or 502 naming the replicas where it failed (with the keyrings
// of all, so the operator sees where each one stands).
func (k *keyringEndpoints) run(ctx *fasthttp.RequestCtx, op adminapi.KeyringOp, key []byte) {
	if k.keyring == nil {
		WriteError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica has no gossip keyring"})
		return
	}
	apply, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	nodes, err := k.keyring(apply, op, key)
	if err != nil {
		WriteError(ctx, err)
		return
	}
	var failed []string
	for _, n := range nodes {
		if n.Error != "" {
			failed = append(failed, n.Node+": "+n.Error)
		}
	}
	if len(failed) == 0 {
		WriteJSON(ctx, http.StatusOK, map[string][]adminapi.NodeKeyring{"nodes": nodes})
		return
	}
	msg := fmt.Sprintf("keyring %s failed on %d of %d replicas: %s", op, len(failed), len(nodes), strings.Join(failed, "; "))
	WriteJSON(ctx, http.StatusBadGateway, struct {
		Error adminapi.ErrorDetail   `json:"error"`
		Nodes []adminapi.NodeKeyring `json:"nodes"`
	}{adminapi.ErrorDetail{Message: msg, Type: "server_error", Code: http.StatusBadGateway}, nodes})
}
