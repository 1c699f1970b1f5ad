package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strings"
)

// The scrubber replaces, in a byte stream, every occurrence of a secret's
// value (and of its usual encodings) with the grant's placeholder, however
// the stream is split into writes.
//
// Invariant: the output contains no pattern; if the input contains none,
// the output equals it. Getting the first half right needs care, because a
// replacement can itself complete a pattern with the bytes around it (a
// placeholder ending in "w" after a value minus its final "w", say). So a
// replacement stays in the buffer until the bytes after it are known; if a
// pattern occurrence overlaps it, it becomes the fallback, a run of one
// byte that occurs in no pattern and so can be part of no occurrence.
// Already written bytes (the last maxLen-1 of which are kept as history)
// take part in the search so that such occurrences are seen.
//
// Only bytes that could begin an occurrence are held back (a tail of the
// buffer that is a proper prefix of a pattern), so a stream is not delayed
// unless its last bytes look like the start of a secret.

type scrubPattern struct {
	pat, rep []byte
}

// scrubSet is a prepared set of patterns, shared by the scrubbers of one
// response.
type scrubSet struct {
	pats     []scrubPattern
	fail     [][]int // KMP failure function of each pattern
	maxLen   int
	fallback []byte
}

type scrubRegion struct{ start, end int } // a placeholder in buf

type scrubber struct {
	*scrubSet
	w io.Writer

	buf     []byte // history (h bytes, already written) then pending bytes
	h       int
	regions []scrubRegion // placeholders in the pending bytes, ascending
	err     error
}

const minPatternLen = 6

// newScrubSet prepares patterns; those shorter than minPatternLen and
// repeats are dropped.
func newScrubSet(pats []scrubPattern) *scrubSet {
	s := &scrubSet{}
	seen := map[string]bool{}
	var used [256]bool
	for _, p := range pats {
		if len(p.pat) < minPatternLen || seen[string(p.pat)] {
			continue
		}
		seen[string(p.pat)] = true
		s.pats = append(s.pats, p)
		s.fail = append(s.fail, kmpFailure(p.pat))
		s.maxLen = max(s.maxLen, len(p.pat))
		for _, c := range p.pat {
			used[c] = true
		}
	}
	for _, c := range []byte("*#!~^|@$&") {
		if !used[c] {
			s.fallback = bytes.Repeat([]byte{c}, 8)
			break
		}
	}
	for c := 0; s.fallback == nil && c < 256; c++ {
		if !used[c] {
			s.fallback = []byte{byte(c)}
		}
	}
	if s.fallback == nil {
		// Every byte value occurs in some pattern (not possible for values
		// the vault accepts): fall back to deleting, which settle still
		// drives to a state with no occurrence.
		s.fallback = []byte{}
	}
	return s
}

// kmpFailure returns f with f[i] the length of the longest proper prefix
// of p[:i+1] that is also its suffix.
func kmpFailure(p []byte) []int {
	f := make([]int, len(p))
	k := 0
	for i := 1; i < len(p); i++ {
		for k > 0 && p[i] != p[k] {
			k = f[k-1]
		}
		if p[i] == p[k] {
			k++
		}
		f[i] = k
	}
	return f
}

// writer returns a scrubber writing to w.
func (set *scrubSet) writer(w io.Writer) *scrubber {
	return &scrubber{scrubSet: set, w: w}
}

// scrub scrubs a whole buffer.
func (set *scrubSet) scrub(b []byte) []byte {
	if set.maxLen == 0 {
		return b
	}
	var out bytes.Buffer
	s := set.writer(&out)
	s.Write(b)
	s.Close()
	return out.Bytes()
}

// newScrubber returns a scrubber for pats writing to w.
func newScrubber(w io.Writer, pats []scrubPattern) *scrubber {
	return newScrubSet(pats).writer(w)
}

// Write scrubs p and writes what is settled.
func (s *scrubber) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.maxLen == 0 {
		_, s.err = s.w.Write(p)
		return len(p), s.err
	}
	s.buf = append(s.buf, p...)
	s.settle()
	if s.err == nil {
		s.flush(false)
	}
	return len(p), s.err
}

// Close writes the rest of the stream (it does not close the writer).
func (s *scrubber) Close() error {
	if s.err != nil || s.maxLen == 0 {
		return s.err
	}
	s.settle()
	if s.err == nil {
		s.flush(true)
	}
	return s.err
}

// settle replaces occurrences until none is left that overlaps the pending
// bytes.
func (s *scrubber) settle() {
	if s.err != nil {
		return
	}
	for range 1 << 20 { // bounded: each round removes an occurrence or a placeholder
		idx, pi := s.leftmost()
		if idx < 0 {
			return
		}
		end := idx + len(s.pats[pi].pat)
		if ri := s.overlap(idx, end); ri >= 0 {
			r := s.regions[ri]
			s.regions = append(s.regions[:ri], s.regions[ri+1:]...)
			s.splice(r.start, r.end, s.fallback)
			continue
		}
		if idx < s.h {
			// An occurrence starting in written bytes and overlapping no
			// placeholder cannot arise (see above); should it, break it
			// where it can still be changed.
			s.splice(s.h, end, s.fallback)
			continue
		}
		rep := s.pats[pi].rep
		s.splice(idx, end, rep)
		s.regions = append(s.regions, scrubRegion{idx, idx + len(rep)})
		sortRegions(s.regions)
	}
	s.err = errors.New("broker: scrubber does not settle")
}

func sortRegions(rs []scrubRegion) {
	for i := len(rs) - 1; i > 0 && rs[i].start < rs[i-1].start; i-- {
		rs[i], rs[i-1] = rs[i-1], rs[i]
	}
}

// leftmost returns the start of the leftmost occurrence overlapping the
// pending bytes (the longest pattern where several start there), or -1.
func (s *scrubber) leftmost() (idx, pat int) {
	idx, pat = -1, -1
	for i, p := range s.pats {
		from := max(0, s.h-len(p.pat)+1)
		j := bytes.Index(s.buf[from:], p.pat)
		if j < 0 {
			continue
		}
		j += from
		if idx < 0 || j < idx || j == idx && len(p.pat) > len(s.pats[pat].pat) {
			idx, pat = j, i
		}
	}
	return idx, pat
}

// overlap returns the index of a placeholder overlapping [start, end), or -1.
func (s *scrubber) overlap(start, end int) int {
	for i, r := range s.regions {
		if r.start < end && start < r.end {
			return i
		}
	}
	return -1
}

// splice replaces buf[a:b] with rep, shifting later placeholders.
func (s *scrubber) splice(a, b int, rep []byte) {
	d := len(rep) - (b - a)
	s.buf = append(s.buf[:a], append(append([]byte{}, rep...), s.buf[b:]...)...)
	for i := range s.regions {
		if s.regions[i].start >= b {
			s.regions[i].start += d
			s.regions[i].end += d
		}
	}
}

// flush writes the pending bytes that no later input can change: all of
// them at the end of the stream, else those before the earliest tail that
// is a proper prefix of a pattern, and never part of a placeholder.
func (s *scrubber) flush(final bool) {
	k := len(s.buf)
	if !final {
		k = len(s.buf) - s.heldBack(s.buf[max(s.h, len(s.buf)-s.maxLen+1):])
		for _, r := range s.regions {
			if r.start < k && k < r.end {
				k = r.start
			}
		}
	}
	if k > s.h {
		if _, err := s.w.Write(s.buf[s.h:k]); err != nil {
			s.err = err
			return
		}
	}
	// Keep maxLen-1 written bytes as history.
	cut := max(0, k-(s.maxLen-1))
	s.buf = append(s.buf[:0], s.buf[cut:]...)
	s.h = k - cut
	rs := s.regions[:0]
	for _, r := range s.regions {
		if r.start >= k {
			rs = append(rs, scrubRegion{r.start - cut, r.end - cut})
		}
	}
	s.regions = rs
}

// heldBack returns the length of the longest suffix of b that is a proper
// prefix of a pattern (where an occurrence could begin).
func (s *scrubber) heldBack(b []byte) int {
	longest := 0
	for i, p := range s.pats {
		f, k := s.fail[i], 0
		for _, c := range b {
			for k > 0 && (k == len(p.pat) || c != p.pat[k]) {
				k = f[k-1]
			}
			if c == p.pat[k] {
				k++
			}
		}
		if k == len(p.pat) { // a whole occurrence: cannot be, settle removed them
			k = f[k-1]
		}
		longest = max(longest, k)
	}
	return longest
}

// valueForms returns the forms of a secret value the scrubber looks for:
// the value; its URL (query and path) and JSON string encodings; and its
// standard and URL-safe base64 encodings, at each of the three alignments
// it can have inside a longer base64 text (as in Basic credentials
// "user:value"), trimmed to the characters that depend on the value only.
func valueForms(value []byte) [][]byte {
	v := string(value)
	forms := []string{v, url.QueryEscape(v), url.PathEscape(v)}
	for _, f := range forms[1:3] {
		forms = append(forms, lowerPercent(f))
	}
	var jb bytes.Buffer
	enc := json.NewEncoder(&jb)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	forms = append(forms, strings.TrimSuffix(strings.TrimSuffix(jb.String(), "\n"), `"`)[1:])
	if j, err := json.Marshal(v); err == nil {
		forms = append(forms, string(j[1:len(j)-1]))
	}
	n := len(value)
	for k := range 3 {
		in := append(make([]byte, k), value...)
		lo := (8*k + 5) / 6
		hi := 8 * (k + n) / 6
		if hi-lo < minPatternLen {
			continue
		}
		for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			forms = append(forms, e.EncodeToString(in)[lo:hi])
		}
	}
	out := make([][]byte, 0, len(forms))
	seen := map[string]bool{}
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, []byte(f))
		}
	}
	return out
}

// lowerPercent lowercases the hex digits of %XX escapes.
func lowerPercent(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lowerHex(b[i+1])
			b[i+2] = lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}
