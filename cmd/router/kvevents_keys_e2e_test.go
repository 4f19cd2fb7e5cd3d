package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/kvevents"
)

// The router keys an engine's blocks by its own chained hash of their token
// IDs (kvevents.AppendKeys), so that nothing depends on reproducing the
// engine's hash. These tests check it against a public engine: for a
// prompt, the router's keys over the tokens the engine's /tokenize gives
// name exactly the blocks the engine's BlockStored events carry for it.

// loopbackPolicy admits loopback addresses only.
func loopbackPolicy(hostport string) (string, error) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil || !ap.Addr().IsLoopback() {
		return "", errors.New("not loopback")
	}
	return hostport, nil
}

// tokenizeAt asks the engine at url for the tokens of req.
func tokenizeAt(t *testing.T, url string, req map[string]any) []uint32 {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post(url+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Tokens) == 0 {
		t.Fatalf("tokenize: %v, %d tokens", err, len(out.Tokens))
	}
	return out.Tokens
}

func postJSON(t *testing.T, url string, req map[string]any) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", url, resp.StatusCode)
	}
}

func TestTheRoutersBlockKeysNameTheBlocksAPublicEngineStores(t *testing.T) {
	const blockSize = 16
	hub, err := kvevents.NewHub(kvevents.HubConfig{Allow: loopbackPolicy,
		ViewConfig: kvevents.ViewConfig{BlockSize: blockSize, StaleAfter: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	sim := freeAddr(t)
	if err := hub.Sync([]kvevents.HubWorker{{ID: 1, Host: sim}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Listen(ln); err != nil {
		t.Fatal(err)
	}
	url := startPeerSimAt(t, sim, []string{"POD_IP=" + sim}, "fake-model", "--enable-kvcache", "--kv-cache-size", "1024",
		"--block-size", fmt.Sprint(blockSize), "--zmq-endpoint", "tcp://"+ln.Addr().String())

	first := strings.Repeat("a completion prompt of the test, word after word. ", 12)
	held := 0
	for i, req := range []map[string]any{
		{"model": "fake-model", "prompt": first},
		// Its continuation: the engine stores the new blocks as the
		// children of the first prompt's last, which the router keys from.
		{"model": "fake-model", "prompt": first + strings.Repeat("And then the next turn of it, further on. ", 10)},
		{"model": "fake-model", "messages": []map[string]string{{"role": "system", "content": strings.Repeat("You are a careful agent. ", 20)},
			{"role": "user", "content": "List the files of the workspace and say which are tests."}}},
	} {
		path := "/v1/completions"
		if _, chat := req["messages"]; chat {
			path = "/v1/chat/completions"
		}
		call := map[string]any{"max_tokens": 1}
		for k, v := range req {
			call[k] = v
		}
		postJSON(t, url+path, call)
		keys := hub.Keys(nil, "", tokenizeAt(t, url, req))
		if i == 1 {
			held -= len(hub.Keys(nil, "", tokenizeAt(t, url, map[string]any{"model": "fake-model", "prompt": first})))
		}
		held += len(keys)
		testwait.EventuallyNil(t, 20*time.Second, func() error {
			st, _ := hub.Status(1)
			if n, trust := hub.Matched(1, keys); n != len(keys) || st.Blocks != held {
				return fmt.Errorf("prompt %d: %d of its %d blocks matched (%v); the set holds %d blocks, want %d",
					i, n, len(keys), trust, st.Blocks, held)
			}
			return nil
		}, "the engine's stored blocks named by the router's keys")
	}
}
