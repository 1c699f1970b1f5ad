package secrets

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The one-pass literal index must say what strings.Contains says.
func TestNeedIndexMatchesContains(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	lits := d.needs.lits
	if len(lits) == 0 {
		t.Fatal("no always rule has a literal: the index is untested")
	}
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "A", ":", "/", "-", "_", ".", "=", "x", "S", "G", "e", "y", "J", " "}
	for range 20000 {
		var b strings.Builder
		for range r.IntN(30) {
			if r.IntN(6) == 0 {
				l := lits[r.IntN(len(lits))]
				b.WriteString(l[:1+r.IntN(len(l))])
				continue
			}
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		found := make([]bool, len(lits))
		d.needs.scan(s, found)
		for i, l := range lits {
			if found[i] != strings.Contains(s, l) {
				t.Fatalf("%q: %q found %v", s, l, found[i])
			}
		}
	}
}
