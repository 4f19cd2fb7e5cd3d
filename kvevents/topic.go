package kvevents

import (
	"net"
	"net/netip"
	"strings"
)

// How a batch that arrives on the bound socket finds its worker. An engine
// that dials in names itself in its topic:
//
//   - the topic a worker was registered with (kv_events_topic), exactly;
//   - llm-d's kv@<host>@<model>, where host is the worker's host:port (one
//     host running several workers: each engine's POD_IP set to its
//     host:port) or its host alone (one worker on that host);
//   - anything else, vLLM's default empty topic among them: the worker on
//     the connection's own address, if there is exactly one.
//
// In every case the worker must be on the address the connection comes
// from: an engine speaks for itself only. A topic that names no known
// worker, names one elsewhere, or cannot tell between several is counted
// and its batches are dropped, never applied to another worker.

// topicIndex finds workers by topic, by host:port, by host and by address.
type topicIndex struct {
	byTopic    map[string]uint32
	byHostPort map[string]uint32
	byHost     map[string][]uint32
	byAddr     map[netip.Addr][]uint32
}

func newTopicIndex(entries map[uint32]*hubEntry) topicIndex {
	t := topicIndex{byTopic: map[string]uint32{}, byHostPort: map[string]uint32{},
		byHost: map[string][]uint32{}, byAddr: map[netip.Addr][]uint32{}}
	for id, e := range entries {
		w := e.worker
		if w.Topic != "" {
			t.byTopic[w.Topic] = id
		}
		if w.Host != "" {
			t.byHostPort[strings.ToLower(w.Host)] = id
			if host, _, err := net.SplitHostPort(w.Host); err == nil {
				host = strings.ToLower(host)
				t.byHost[host] = append(t.byHost[host], id)
			}
		}
		if e.addr.IsValid() {
			t.byAddr[e.addr] = append(t.byAddr[e.addr], id)
		}
	}
	return t
}

// known says whether any worker is on addr.
func (t topicIndex) known(addr netip.Addr) bool { return len(t.byAddr[addr.Unmap()]) > 0 }

// topicError is why a topic found no worker.
type topicError string

func (e topicError) Error() string { return string(e) }

// The reasons a topic finds no worker, as metrics count them.
const (
	errTopicUnknown   topicError = "unknown"   // names no known worker
	errTopicAmbiguous topicError = "ambiguous" // cannot tell between workers
	errTopicElsewhere topicError = "elsewhere" // names a worker on another address
)

// resolve finds the worker a batch under topic, on a connection from
// remote, is for.
func (t topicIndex) resolve(entries map[uint32]*hubEntry, topic string, remote netip.Addr) (uint32, error) {
	id, err := t.named(topic, remote)
	if err != nil {
		return 0, err
	}
	if e := entries[id]; e == nil || e.addr != remote.Unmap() {
		return 0, errTopicElsewhere
	}
	return id, nil
}

func (t topicIndex) named(topic string, remote netip.Addr) (uint32, error) {
	if id, ok := t.byTopic[topic]; ok {
		return id, nil
	}
	if host, ok := llmdHost(topic); ok {
		host = strings.ToLower(host)
		if id, ok := t.byHostPort[host]; ok {
			return id, nil
		}
		return only(t.byHost[strings.Trim(host, "[]")])
	}
	return only(t.byAddr[remote.Unmap()])
}

// llmdHost is the host of a topic kv@<host>@<model>.
func llmdHost(topic string) (string, bool) {
	rest, ok := strings.CutPrefix(topic, "kv@")
	if !ok {
		return "", false
	}
	host, _, ok := strings.Cut(rest, "@")
	return host, ok && host != ""
}

func only(ids []uint32) (uint32, error) {
	switch len(ids) {
	case 0:
		return 0, errTopicUnknown
	case 1:
		return ids[0], nil
	}
	return 0, errTopicAmbiguous
}
