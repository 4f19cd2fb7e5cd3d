package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func callAs(t *testing.T, key, method, u, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEndToEndAStoredResponseIsItsKeysOnEveryReplica: two replicas of a
// tier (one gossip key, the secret their owner seals share) in front of
// the same workersims, with --api-keys; a response made with one key
// through one replica is that key's through either replica, and no other
// key's, whatever it asks.
func TestEndToEndAStoredResponseIsItsKeysOnEveryReplica(t *testing.T) {
	router, workersim := binaries(t)
	_, w0 := startWorkersim(t, workersim, "w0")
	_, w1 := startWorkersim(t, workersim, "w1")
	args := []string{"--worker-urls", w0 + "," + w1, "--api-keys", "key-one,key-two",
		"--gossip-key", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))}
	replicas := []string{startRouterProcess(t, router, args...), startRouterProcess(t, router, args...)}
	status, body := callAs(t, "key-one", "POST", replicas[0]+"/v1/responses",
		`{"model":"sim-model","input":"my secret","max_output_tokens":4,"metadata":{"app":"e2e"}}`)
	var created struct{ ID string }
	if json.Unmarshal([]byte(body), &created); status != 200 || !strings.HasPrefix(created.ID, "resp_") {
		t.Fatalf("create: %d %s", status, body)
	}
	cont := fmt.Sprintf(`{"model":"sim-model","input":"go on","previous_response_id":%q,"max_output_tokens":4}`, created.ID)
	for _, base := range replicas {
		for _, c := range [][3]string{{"GET", "/v1/responses/" + created.ID, ""}, {"GET", "/v1/responses/" + created.ID + "/input_items", ""},
			{"POST", "/v1/responses/" + created.ID + "/cancel", ""}, {"POST", "/v1/responses", cont}, {"DELETE", "/v1/responses/" + created.ID, ""}} {
			if status, body := callAs(t, "key-two", c[0], base+c[1], c[2]); status != 404 || strings.Contains(body, "secret") {
				t.Errorf("%s: key-two %s %s: %d %s, want 404", base, c[0], c[1], status, body)
			}
		}
		if status, body := callAs(t, "key-one", "GET", base+"/v1/responses/"+created.ID+"/input_items", ""); status != 200 || !strings.Contains(body, "my secret") {
			t.Errorf("%s: the owner's input_items: %d %s", base, status, body)
		}
		if status, body := callAs(t, "key-one", "POST", base+"/v1/responses", cont); status != 200 {
			t.Errorf("%s: the owner's continuation: %d %s", base, status, body)
		}
	}
	if status, body := callAs(t, "key-one", "DELETE", replicas[1]+"/v1/responses/"+created.ID, ""); status != 200 {
		t.Fatalf("the owner's DELETE through the other replica: %d %s", status, body)
	}
}
