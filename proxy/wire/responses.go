package wire

import (
	"bytes"
	"strings"
)

// What the router reads of the Responses API's stored responses: the id a
// request names in its path, the id of the response a worker made, and
// the metadata a request carries its owner's seal in.

// maxResponseIDLen bounds the ids the router learns.
const maxResponseIDLen = 256

// ResponseID finds the id of the response object in a worker's answer to
// POST /v1/responses: its top-level "id", or, for a stream, the "id" of
// the "response" of its first event (response.created). It reads the JSON
// with the scanner, so spacing and key order do not matter, and an id
// inside some other value is never taken.
func ResponseID(answer []byte) string {
	doc := answer
	if data, ok := firstEventData(answer); ok {
		doc = data
		if inner, ok := Member(doc, "response"); ok {
			doc = inner
		}
	}
	id, ok := MemberString(doc, "id")
	if !ok || !bytes.HasPrefix(id, []byte("resp_")) || len(id) > maxResponseIDLen || bytes.ContainsAny(id, "/?#%\\") {
		return ""
	}
	return string(id)
}

// firstEventData is the data of the first event of an SSE stream, when b
// starts as one.
func firstEventData(b []byte) ([]byte, bool) {
	for len(b) > 0 {
		line := b
		n := bytes.IndexByte(b, '\n')
		if n < 0 {
			return nil, false // the event is not whole
		}
		line, b = bytes.TrimSuffix(b[:n], []byte("\r")), b[n+1:]
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(data), true
		}
		if len(line) > 0 && !bytes.HasPrefix(line, []byte("event:")) && line[0] != ':' {
			return nil, false
		}
	}
	return nil, false
}

// Member is the raw value of the top-level member key of the object
// doc, when doc is one that holds it.
func Member(doc []byte, key string) ([]byte, bool) {
	vs := jsonSkipWS(doc, 0)
	if vs >= len(doc) || doc[vs] != '{' {
		return nil, false
	}
	var found []byte
	_, err := jsonEachMember(doc, vs, 0, func(k []byte, vs int) (int, error) {
		ve, err := jsonSkipValue(doc, vs, 1)
		if err == nil && found == nil && string(k) == key {
			found = doc[vs:ve]
		}
		return ve, err
	})
	return found, err == nil && found != nil
}

// MemberString is the top-level string member key of the object doc,
// raw (an id has nothing to unescape).
func MemberString(doc []byte, key string) ([]byte, bool) {
	v, ok := Member(doc, key)
	if !ok || len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

// UniqueMetadata refuses a body whose metadata object names a key twice.
func UniqueMetadata(body []byte) error {
	meta, ok := Member(body, "metadata")
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return nil
	}
	var keys keySet
	_, err := jsonEachMember(meta, 0, 2, func(raw []byte, vs int) (int, error) {
		if key, dup := keys.add(raw); dup {
			return vs, duplicateKey("metadata", key)
		}
		return jsonSkipValue(meta, vs, 2)
	})
	if _, isAPI := err.(*Error); err != nil && !isAPI {
		return malformed(err)
	}
	return err
}

// StoredResponseID reads the id of /v1/responses/{id}[/cancel|/input|/input_items].
func StoredResponseID(path []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(path, []byte("/v1/responses/"))
	if !ok || len(rest) == 0 {
		return "", false
	}
	id, sub, _ := strings.Cut(string(rest), "/")
	switch sub {
	case "", "cancel", "input", "input_items":
		return id, id != "" && !strings.ContainsAny(id, "?#%")
	}
	return "", false
}
