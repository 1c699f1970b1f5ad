package broker

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"
)

const testPH = "warden-ph-abcdefghijklmnopqrstuvwxyz234567"

func patternsFor(ph string, values ...string) []scrubPattern {
	var pats []scrubPattern
	for _, v := range values {
		for _, f := range valueForms([]byte(v)) {
			pats = append(pats, scrubPattern{pat: f, rep: []byte(ph)})
		}
	}
	return pats
}

// scrubChunks writes in to a scrubber in pieces of the given sizes
// (cycled; 0 is read as 1).
func scrubChunks(in []byte, pats []scrubPattern, sizes []byte) []byte {
	var out bytes.Buffer
	s := newScrubber(&out, pats)
	for i := 0; len(in) > 0; i++ {
		n := 1
		if len(sizes) > 0 {
			n = int(sizes[i%len(sizes)])
		}
		n = min(max(n, 1), len(in))
		s.Write(in[:n])
		in = in[n:]
	}
	s.Close()
	return out.Bytes()
}

func TestScrubber(t *testing.T) {
	v := secretV1
	pats := patternsFor(testPH, v)
	b64 := base64.StdEncoding.EncodeToString([]byte(v))
	basic := base64.StdEncoding.EncodeToString([]byte("user:" + v))
	in := "start " + v + " mid " + v + v + " b64=" + b64 + " basic=" + basic +
		" url=" + url.QueryEscape("Bearer "+v) + " end"
	for _, sizes := range [][]byte{nil, {1}, {2, 3}, {7}, {100}} {
		out := string(scrubChunks([]byte(in), pats, sizes))
		for _, p := range pats {
			if strings.Contains(out, string(p.pat)) {
				t.Fatalf("sizes %v: output holds %q:\n%s", sizes, p.pat, out)
			}
		}
		if !strings.HasPrefix(out, "start "+testPH+" mid "+testPH+testPH+" b64=") || !strings.HasSuffix(out, " end") {
			t.Fatalf("sizes %v: %s", sizes, out)
		}
	}
	// No secret: unchanged, whatever the chunking, and nothing held back
	// that cannot start a secret.
	plain := []byte("nothing to see here, sk-live-REAL but not the rest")
	for _, sizes := range [][]byte{nil, {1}, {5}} {
		if out := scrubChunks(plain, pats, sizes); !bytes.Equal(out, plain) {
			t.Fatalf("plain changed: %q", out)
		}
	}
	var out bytes.Buffer
	s := newScrubber(&out, pats)
	s.Write([]byte("data: {\"tok\": 1}\n\n"))
	if out.String() != "data: {\"tok\": 1}\n\n" {
		t.Fatalf("streamed bytes held back: %q", out.String())
	}
	s.Write([]byte("x sk-li"))
	if out.String() != "data: {\"tok\": 1}\n\nx " {
		t.Fatalf("prefix of a secret not held back: %q", out.String())
	}
}

// A replacement that would complete a secret with its neighbours falls
// back to a run of a byte that occurs in no pattern.
func TestScrubberReplacementOverlap(t *testing.T) {
	v := "abcdefgw"
	ph := "warden-ph-xyz"
	pats := []scrubPattern{{pat: []byte(v), rep: []byte(ph)}}
	for _, in := range []string{
		"abcdefg" + v,             // "abcdefg" + "w…" would spell v
		v + "arden-ph-xyz",        // fine either way
		"abcdefgabcdefgwabcdefgw", // twice
	} {
		for _, sizes := range [][]byte{nil, {1}, {3}} {
			out := string(scrubChunks([]byte(in), pats, sizes))
			if strings.Contains(out, v) {
				t.Fatalf("%q sizes %v: output %q holds the secret", in, sizes, out)
			}
		}
	}
	// The placeholder itself containing the secret.
	pats = []scrubPattern{{pat: []byte("secret-value"), rep: []byte("x-secret-value-x")}}
	if out := string(scrubChunks([]byte("a secret-value b"), pats, []byte{2})); strings.Contains(out, "secret-value") {
		t.Fatalf("output %q", out)
	}
}

// FuzzScrubber checks the scrubber's invariant: the output never contains
// a pattern (the secret or any of its encoded forms) and, when the input
// contains none, equals the input; for any secret, placeholder, input and
// split of the input into writes.
func FuzzScrubber(f *testing.F) {
	f.Add([]byte(secretV1), []byte(testPH), []byte("auth=Bearer "+secretV1+" ok"), []byte{3, 1, 7})
	f.Add([]byte("abcdefgw"), []byte("warden-ph-xyz"), []byte("abcdefgabcdefgw"), []byte{1})
	f.Add([]byte("secret-value"), []byte("x-secret-value-x"), []byte("secret-valuesecret-value"), []byte{2})
	f.Add([]byte("aaaaaaaa"), []byte("aaa"), []byte("aaaaaaaaaaaaaaaaaaaaa"), []byte{4})
	f.Add([]byte("user:pass-1234"), []byte(testPH), []byte(base64.StdEncoding.EncodeToString([]byte("x:user:pass-1234"))), []byte{5})
	f.Fuzz(func(t *testing.T, secret, ph, in, sizes []byte) {
		if len(secret) > 256 || len(ph) > 256 || len(in) > 4096 {
			return
		}
		var out bytes.Buffer
		s := newScrubber(&out, patternsFor(string(ph), string(secret)))
		rest := in
		for i := 0; len(rest) > 0; i++ {
			n := 1
			if len(sizes) > 0 {
				n = int(sizes[i%len(sizes)])
			}
			n = min(max(n, 1), len(rest))
			if _, err := s.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		got := out.Bytes()
		present := false
		for _, p := range s.pats {
			if bytes.Contains(got, p.pat) {
				t.Fatalf("output %q contains pattern %q (secret %q, placeholder %q, input %q)", got, p.pat, secret, ph, in)
			}
			present = present || bytes.Contains(in, p.pat)
		}
		if !present && !bytes.Equal(got, in) {
			t.Fatalf("no secret in %q, but output is %q", in, got)
		}
		if len(secret) >= minPatternLen && bytes.Contains(got, secret) {
			t.Fatalf("output contains the secret")
		}
	})
}

// Large values and inputs stay linear-ish: a 16 KiB value (URL-encoded
// forms up to 48 KiB) over a 1 MiB stream.
func TestScrubberLargeValue(t *testing.T) {
	v := bytes.Repeat([]byte("k/+ =&"), 16<<10/6)
	set := newScrubSet(patternsFor(testPH, string(v)))
	in := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	copy(in[1<<19:], v)
	start := time.Now()
	var out bytes.Buffer
	s := set.writer(&out)
	for rest := in; len(rest) > 0; {
		n := min(32<<10, len(rest))
		s.Write(rest[:n])
		rest = rest[n:]
	}
	s.Close()
	if bytes.Contains(out.Bytes(), v) || out.Len() != len(in)-len(v)+len(testPH) {
		t.Fatalf("large value not scrubbed (out %d bytes)", out.Len())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("scrubbing 1 MiB took %v", d)
	}
}
