package credential

import (
	"errors"
	"testing"
)

func TestEverySpellingOfAKeyIsOneCredential(t *testing.T) {
	for _, tc := range []struct {
		authorization, apiKey string
		want                  string
		err                   error
	}{
		{"Bearer k1", "", "k1", nil},
		{"bearer k1", "", "k1", nil},
		{"BEARER k1", "", "k1", nil},
		{"Bearer  k1", "", "k1", nil},
		{"Bearer\tk1 ", "", "k1", nil},
		{" Bearer k1", "", "k1", nil},
		{"", "k1", "k1", nil},
		{"", " k1 ", "k1", nil},
		{"Bearer k1", "k1", "k1", nil},
		{"Basic azE6", "k1", "k1", nil},
		{"Bearer k1", "k2", "", ErrAmbiguous},
		{"Bearerk1", "", "", nil},
		{"Bearer", "", "", nil},
		{"Bearer ", "", "", nil},
		{"Bearer k 1", "", "", nil},
		{"Bearer k\x001", "", "", nil},
		{"Basic azE6", "", "", nil},
		{"", "", "", nil},
	} {
		got, err := Of([]byte(tc.authorization), []byte(tc.apiKey))
		if string(got) != tc.want || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("Of(%q, %q) = %q, %v; want %q, %v", tc.authorization, tc.apiKey, got, err, tc.want, tc.err)
		}
	}
}

func TestAKeyHasOneIdentity(t *testing.T) {
	a, _ := Of([]byte("bearer  k1"), nil)
	b, _ := Of(nil, []byte("k1"))
	if IDOf(a) != IDOf(b) || IDOf(a) == IDOf([]byte("k2")) {
		t.Fatal("the spellings of one key have different identities, or two keys one")
	}
}

// FuzzOf: whatever a client sends, a credential taken has no white space
// or control byte, and is taken the same from either header.
func FuzzOf(f *testing.F) {
	for _, s := range []string{"Bearer k", "bearer  k ", "Basic x", "", "Bearer", "Bearer \x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, authorization string) {
		token, err := Of([]byte(authorization), nil)
		if err != nil || token == nil {
			return
		}
		for _, c := range token {
			if c <= ' ' || c == 0x7f {
				t.Fatalf("%q gave the token %q", authorization, token)
			}
		}
		if again, _ := Of(nil, token); string(again) != string(token) {
			t.Fatalf("%q gave %q, which x-api-key reads as %q", authorization, token, again)
		}
	})
}
