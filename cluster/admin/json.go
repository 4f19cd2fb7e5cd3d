package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// decodeBody reads an admin request body into v: one JSON value, no field
// v does not have, and no key named twice in one object. encoding/json
// keeps the last of two such keys where another reader (a proxy, an audit
// log) may keep the first, so that what was checked and what was applied
// could differ; the inference API refuses them for the same reason.
func decodeBody(body []byte, v any) error {
	if err := noDuplicateKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return BadJSON(err)
	}
	return nil
}

// noDuplicateKeys walks every object of body and refuses a key given twice
// in one of them, naming it. A body that is not JSON is left to the decoder
// to explain.
func noDuplicateKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	err := walkValue(dec, "the body")
	var dup *duplicateKeyError
	if errors.As(err, &dup) {
		return &statusError{http.StatusBadRequest, "invalid_request_error", dup.Error()}
	}
	return nil
}

type duplicateKeyError struct{ where, key string }

func (e *duplicateKeyError) Error() string {
	return fmt.Sprintf("%s names the key %q twice", e.where, e.key)
}

// walkValue reads one value from dec; where names it in an error.
func walkValue(dec *json.Decoder, where string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, where)
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

func walkObject(dec *json.Decoder, where string) error {
	seen := map[string]struct{}{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if _, dup := seen[key]; dup {
			return &duplicateKeyError{where, key}
		}
		seen[key] = struct{}{}
		if err := walkValue(dec, fmt.Sprintf("%s.%s", where, key)); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
