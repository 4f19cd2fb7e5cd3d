package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// Every worker gets the body its client sent while many requests of
// bodies of the same size class are in flight: a body's buffer goes back
// to the pool only once its request was served, never while an attempt
// may still write it.
func TestConcurrentRequestsKeepTheirOwnBodies(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		sum := sha256.Sum256(e.Body)
		e.JSON(200, fmt.Sprintf(`{"sum":%q}`, hex.EncodeToString(sum[:])))
	})
	r := startRouter(t, Config{}, w)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := range 16 {
		wg.Go(func() {
			for i := range 20 {
				body := completion(strings.Repeat(fmt.Sprintf("client %d request %d ", c, i), 300), false)
				if err := sendsIntact(client, r.url, body); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// sendsIntact posts body and checks the worker's digest of what it got.
func sendsIntact(client *http.Client, url, body string) error {
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(body))
	if want := fmt.Sprintf(`{"sum":%q}`, hex.EncodeToString(sum[:])); resp.StatusCode != 200 || string(got) != want {
		return fmt.Errorf("status %d, %s; the worker did not get the body sent (%s)", resp.StatusCode, got, want)
	}
	return nil
}
