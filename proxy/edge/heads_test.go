package edge

import "testing"

func TestHeadEndsFollowsAHeadAcrossReads(t *testing.T) {
	for _, tc := range []struct {
		parts []string
		bad   bool
	}{
		{[]string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n{\n\n}"}, false},
		{[]string{"GET / HTTP/1.1\r", "\nHost: x\r\n\r", "\n"}, false},
		{[]string{"\r\n", "GET / HTTP/1.1\r\nA: b\n\r\n"}, true},
		{[]string{"GET / HTTP/1.1\nHost: x\n", "\n"}, true},
		{[]string{"GET / HTTP/1.1\r\nHost: x\r\n"}, false}, // not ended yet
	} {
		var h headEnds
		for _, p := range tc.parts {
			h.scan([]byte(p))
		}
		if h.bad != tc.bad {
			t.Errorf("%q: bad %v, want %v", tc.parts, h.bad, tc.bad)
		}
	}
}
