package store

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// MaxKVEventsEndpointBytes bounds a worker's kv_events_endpoint.
const MaxKVEventsEndpointBytes = 512

// NormalizeKVEventsEndpoint validates an engine's KV-event endpoint and
// returns its canonical form: tcp://host:port with the host spelled as
// worker URLs spell it (lowercase, IP literals in one form), nothing else.
// "" stays "" (the default endpoint). Errors are *FieldError for field
// "kv_events_endpoint". The destination policy is checked by the caller.
func NormalizeKVEventsEndpoint(raw string) (string, error) {
	return NormalizeEndpointField("kv_events_endpoint", raw)
}

// NormalizeEndpointField is NormalizeKVEventsEndpoint for the field named field
// (kv_events_replay_endpoint, say).
func NormalizeEndpointField(field, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	bad := func(why string) error { return fieldError(field, "%q: %s", raw, why) }
	if len(raw) > MaxKVEventsEndpointBytes {
		return "", bad("too long")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "tcp" || u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.Port() == "" {
		return "", bad("want tcp://host:port")
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return "", bad("the port is not in 1..65535")
	}
	// The host is checked and spelled as a worker URL's host would be.
	w, err := workerurl.Parse("http://" + net.JoinHostPort(u.Hostname(), u.Port()))
	if err != nil {
		return "", bad(strings.TrimPrefix(err.Error(), workerurl.ErrInvalid.Error()+": "))
	}
	return "tcp://" + w.Addr(), nil
}

// DefaultKVEventsEndpoint is the endpoint of a worker that declares none:
// its URL's host on vLLM's default port, 5557.
func DefaultKVEventsEndpoint(workerURL string) (string, error) {
	w, err := workerurl.Parse(workerURL)
	if err != nil {
		return "", err
	}
	return "tcp://" + net.JoinHostPort(w.Host(), "5557"), nil
}

// MaxKVEventsTopicBytes bounds a worker's kv_events_topic.
const MaxKVEventsTopicBytes = 256

// ValidateKVEventsTopic refuses a kv_events_topic that is too long or holds
// control characters (it is shown in logs and metrics). Errors are
// *FieldError for field "kv_events_topic".
func ValidateKVEventsTopic(topic string) error {
	if len(topic) > MaxKVEventsTopicBytes {
		return fieldError("kv_events_topic", "longer than %d bytes", MaxKVEventsTopicBytes)
	}
	for _, r := range topic {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return fieldError("kv_events_topic", "%q holds a control character or is not UTF-8", topic)
		}
	}
	return nil
}
