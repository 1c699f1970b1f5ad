package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/auth"
)

// FuzzParseAuthorization checks that the header parser never panics, that
// everything it rejects is an ErrUnauthenticated, and that everything it
// accepts is a well-formed key that round-trips. Seeds live in
// testdata/fuzz/FuzzParseAuthorization.
func FuzzParseAuthorization(f *testing.F) {
	f.Add("Bearer wdn_abcdefgh_0123456789ABCDEFGHIJabcdefghij01")
	f.Add("")
	f.Fuzz(func(t *testing.T, header string) {
		k, err := auth.ParseAuthorization(header)
		if err != nil {
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
			}
			if k != (auth.Key{}) {
				t.Fatalf("error with a non-zero key %+v", k)
			}
			return
		}
		s := k.String()
		if len(s) != auth.KeyLen || !strings.HasPrefix(s, auth.KeyPrefix) || !strings.Contains(header, s) {
			t.Fatalf("accepted %q as %q", header, s)
		}
		back, err := auth.ParseKey(s)
		if err != nil || back != k {
			t.Fatalf("round trip of %q: %+v, %v", s, back, err)
		}
		if again, err := auth.ParseAuthorization("Bearer " + s); err != nil || again != k {
			t.Fatalf("re-parse of %q: %+v, %v", s, again, err)
		}
	})
}
