package inject

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The one-pass trigger index must say exactly what the per-rule
// strings.Contains over strings.ToLower said, Unicode case folding included.
func TestTriggerIndexMatchesContains(t *testing.T) {
	groups := make([][]string, 0, len(rules)+1)
	for i := range rules {
		groups = append(groups, rules[i].triggers)
	}
	groups = append(groups, rot13Triggers)
	want := func(text string) uint32 {
		lower := strings.ToLower(text)
		var m uint32
		for g, ws := range groups {
			if containsAnyOf(lower, ws) {
				m |= 1 << g
			}
		}
		return m
	}
	texts := []string{"", "x", "IGNORE previous", "ignor", "<|im_start|>", "[INST]", "Dan", "da n",
		"vtaber", "VaFgEhPgVbAf", "developer MODE", "the \u212Aelvin sign: DEVELOPER MODE", "İgnore", "prompt\u00e9",
		"Anything Now", "<IMPORTANT>", "un", "unrestricte", "ethica", "safety first"}
	alphabet := []string{"a", "d", "n", "i", "g", "o", "r", "e", "<", "|", "[", "/", "s", "v", "t", "q", "f", "w", " ",
		"A", "N", "I", "\u212A", "İ", "é", "\u0130", "p", "m", "y", "h", "l", "b", "u", "x", "c"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(40) {
			if r.IntN(8) == 0 {
				ws := groups[r.IntN(len(groups))]
				w := ws[r.IntN(len(ws))]
				if r.IntN(2) == 0 {
					w = strings.ToUpper(w)
				}
				b.WriteString(w[:1+r.IntN(len(w))])
				continue
			}
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		if got, _ := ruleTriggers.groups(s); got != want(s) {
			w := want(s)
			t.Fatalf("%q: groups %05b, want %05b", s, got, w)
		}
	}
}

// heuristics skips invisible() on ASCII text: it must find nothing there,
// and groups must say ASCII exactly when the text is.
func TestInvisibleNothingInASCII(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(128))
		}
		if h := invisible(string(b)); len(h) != 0 {
			t.Fatalf("%q: %+v", b, h)
		}
		if _, ascii := ruleTriggers.groups(string(b)); !ascii {
			t.Fatalf("%q: not ASCII?", b)
		}
	}
	if _, ascii := ruleTriggers.groups("a\u200bb"); ascii {
		t.Fatal("zero-width space taken for ASCII")
	}
}
