package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// TestTreeMatchesRFC6962 compares the compact tree with x/mod's
// independent RFC 6962 implementation (tlog) at every size up to 70.
func TestTreeMatchesRFC6962(t *testing.T) {
	var tree Tree
	var stored []tlog.Hash
	hr := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	for n := int64(1); n <= 70; n++ {
		h := sha256.Sum256([]byte(fmt.Sprint(n)))
		if err := tree.Append(hex.EncodeToString(h[:])); err != nil {
			t.Fatal(err)
		}
		more, err := tlog.StoredHashes(n-1, h[:], hr)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, more...)
		want, err := tlog.TreeHash(n, hr)
		if err != nil {
			t.Fatal(err)
		}
		if got := tree.Root(); got != want {
			t.Fatalf("size %d: root %x, want %x", n, got, want)
		}
	}
}
