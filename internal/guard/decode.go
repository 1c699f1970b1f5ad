package guard

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// seg is a string under inspection and the way back from its offsets to the
// offsets of its parent, and so to the input.
type seg struct {
	text   string
	parent *seg
	enc    string // the decoding that produced text from the parent: json, escape, url, base64
	// Mapping to the parent, one of:
	off      []int32 // parent offset of each byte of text, len(text)+1 entries
	base     int     // identity shifted by base (off == nil, !whole)
	whole    bool    // text as a whole comes from parent[base:wholeEnd]
	wholeEnd int
}

// toRoot maps the span [a, b) of g.text to the input.
func (g *seg) toRoot(a, b int) (int, int, bool) {
	exact := true
	for ; g.parent != nil; g = g.parent {
		switch {
		case g.whole:
			a, b, exact = g.base, g.wholeEnd, false
		case g.off != nil:
			// Keep the span on escape boundaries: every byte of a rune
			// decoded from one escape maps to the escape's start.
			for b < len(g.text) && b > 0 && g.off[b] == g.off[b-1] {
				b++
			}
			for a > 0 && g.off[a] == g.off[a-1] {
				a--
			}
			a, b = int(g.off[a]), int(g.off[b])
		default:
			a, b = a+g.base, b+g.base
		}
	}
	return a, b, exact
}

func (g *seg) encoding() string {
	var parts []string
	for ; g != nil && g.parent != nil; g = g.parent {
		parts = append(parts, g.enc)
	}
	if len(parts) == 0 {
		return ""
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ">")
}

// inspect inspects g: as a JSON document when it is one, else by running
// the detectors on it and on what it decodes to.
func (st *state) inspect(g *seg, key string, depth int) {
	if depth < st.maxDepth && st.inspectJSON(g, depth) {
		return
	}
	st.detect(g, key)
	if depth >= st.maxDepth {
		return
	}
	st.decode(g, key, depth)
}

// inspectJSON walks g when it is a JSON object or array and reports whether
// it was one.
func (st *state) inspectJSON(g *seg, depth int) bool {
	t := g.text
	i := 0
	for i < len(t) && isSpace(t[i]) {
		i++
	}
	if i == len(t) || (t[i] != '{' && t[i] != '[') {
		return false
	}
	p := &jparser{s: t}
	if !p.parse() {
		return false
	}
	st.walkJSON(g, p, depth)
	return true
}

// walkJSON inspects every string value of the parsed JSON document g.text.
func (st *state) walkJSON(g *seg, p *jparser, depth int) {
	saved := st.doc
	var outer *docCtx
	if saved.p != nil {
		outer = &saved
	}
	for _, lf := range p.leaves {
		raw := g.text[lf.start:lf.end]
		child := &seg{parent: g, enc: "json"}
		if lf.esc {
			child.text, child.off = unescapeJSON(raw, int(lf.start))
		} else {
			child.text, child.base = raw, int(lf.start)
		}
		st.doc = docCtx{p: p, leaf: lf.elem, outer: outer}
		st.inspect(child, p.key(lf.elem), depth+1)
	}
	st.doc = saved
}

// decode inspects what g.text decodes to: backslash escapes, percent
// encoding and base64 runs.
func (st *state) decode(g *seg, key string, depth int) {
	t := g.text
	if hasEscape(t) {
		if d, off, ok := unescapeBackslash(t); ok && st.spend(len(d)) {
			st.inspect(&seg{text: d, parent: g, enc: "escape", off: off}, key, depth+1)
		}
	}
	if hasPercent(t) {
		if d, off, ok := unescapePercent(t, false); ok && st.spend(len(d)) {
			st.inspect(&seg{text: d, parent: g, enc: "url", off: off}, key, depth+1)
		}
	}
	// In a form-encoded query a '+' is a space; it is decoded in a view of
	// its own, as a literal '+' (base64) stays one in the view above.
	if strings.IndexByte(t, '+') >= 0 && strings.IndexByte(t, '=') >= 0 && strings.ContainsAny(t, "?&") {
		if d, off, ok := unescapePercent(t, true); ok && st.spend(len(d)) {
			st.inspect(&seg{text: d, parent: g, enc: "url", off: off}, key, depth+1)
		}
	}
	if len(t) >= minBase64 {
		st.base64Runs(g, key, depth)
	}
}

// hasEscape reports backslash escapes worth decoding: an escaped quote
// (escaped JSON), \u, \x or \/. Text whose only escapes are \n or \t (source
// code in a string) is not decoded again.
func hasEscape(t string) bool {
	for i := strings.IndexByte(t, '\\'); i >= 0 && i+1 < len(t); {
		switch t[i+1] {
		case '"', 'u', 'x', '/':
			return true
		}
		n := strings.IndexByte(t[i+2:], '\\')
		if n < 0 {
			return false
		}
		i += 2 + n
	}
	return false
}

// hasPercent reports a %XX sequence.
func hasPercent(t string) bool {
	for i := strings.IndexByte(t, '%'); i >= 0 && i+2 < len(t); {
		if hexVal(t[i+1]) >= 0 && hexVal(t[i+2]) >= 0 {
			return true
		}
		n := strings.IndexByte(t[i+1:], '%')
		if n < 0 {
			return false
		}
		i += 1 + n
	}
	return false
}

func (st *state) spend(n int) bool {
	if n > st.budget {
		return false
	}
	st.budget -= n
	return true
}

// b64class: 1 standard-only (+ /), 2 URL-only (- _), 3 both alphabets.
var b64class = func() (t [256]byte) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 3
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = 3
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = 3
	}
	t['+'], t['/'] = 1, 1
	t['-'], t['_'] = 2, 2
	return t
}()

// base64Runs decodes the base64 runs of g.text that hold printable text.
func (st *state) base64Runs(g *seg, key string, depth int) {
	t := g.text
	for i := 0; i < len(t); {
		if b64class[t[i]] == 0 {
			i++
			continue
		}
		j := i
		class := byte(3)
		for j < len(t) && b64class[t[j]] != 0 {
			class &= b64class[t[j]]
			j++
		}
		end := j
		for end < len(t) && end-j < 2 && t[end] == '=' {
			end++
		}
		if j-i >= minBase64 && class != 0 {
			st.tryBase64(g, key, depth, i, j, end, class)
		}
		i = end
		if i == j {
			i++
		}
	}
}

func (st *state) tryBase64(g *seg, key string, depth int, i, j, end int, class byte) {
	run := g.text[i:j]
	if isHexOrDigits(run) {
		return
	}
	// A long run can be a token glued to a prefix ("Basic dXNl..." is
	// split by the space already); decoding only the whole run is enough
	// for base64 written by an encoder.
	enc := base64.RawStdEncoding
	if class == 2 {
		enc = base64.RawURLEncoding
	}
	if len(run)%4 == 1 {
		return
	}
	n := enc.DecodedLen(len(run))
	if !st.spend(n) {
		return
	}
	buf := make([]byte, n)
	m, err := enc.Decode(buf, []byte(run))
	if err != nil && class == 3 {
		m, err = base64.RawURLEncoding.Decode(buf, []byte(run))
	}
	if err != nil || m < 8 || !printable(buf[:m]) {
		return
	}
	st.inspect(&seg{text: string(buf[:m]), parent: g, enc: "base64", whole: true, base: i, wholeEnd: end}, key, depth+1)
}

func isHexOrDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// printable reports whether b is UTF-8 text: at most 1 in 20 runes a
// control character or invalid, and none a NUL.
func printable(b []byte) bool {
	bad := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c == 0 {
				return false
			}
			if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
				bad++
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			bad++
		}
		i += n
	}
	return bad*20 <= len(b)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		v := hexVal(s[i])
		if v < 0 {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// unescapeJSON decodes the content of a JSON string (without its quotes)
// that starts at offset base of the parent, with the parent offset of each
// decoded byte.
func unescapeJSON(raw string, base int) (string, []int32) {
	d, off, _ := unescape(raw, base, false)
	return d, off
}

// unescapeBackslash decodes backslash escapes in text: the JSON ones plus
// \xNN. ok is false when there is nothing to decode.
func unescapeBackslash(t string) (string, []int32, bool) {
	return unescape(t, 0, true)
}

func unescape(raw string, base int, hexEsc bool) (string, []int32, bool) {
	b := make([]byte, 0, len(raw))
	off := make([]int32, 0, len(raw)+1)
	changed := false
	put := func(pos int, p []byte) {
		for range p {
			off = append(off, int32(base+pos))
		}
		b = append(b, p...)
	}
	var rb [4]byte
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' || i+1 == len(raw) {
			// Copy the run up to the next backslash at once.
			j := len(raw)
			if k := strings.IndexByte(raw[i+1:], '\\'); k >= 0 {
				j = i + 1 + k
			}
			b = append(b, raw[i:j]...)
			for ; i < j; i++ {
				off = append(off, int32(base+i))
			}
			continue
		}
		start := i
		e := raw[i+1]
		simple := byte(0)
		switch e {
		case 'n':
			simple = '\n'
		case 't':
			simple = '\t'
		case 'r':
			simple = '\r'
		case 'b':
			simple = '\b'
		case 'f':
			simple = '\f'
		case '"', '\\', '/':
			simple = e
		case '\'':
			if hexEsc {
				simple = e
			}
		}
		if simple != 0 {
			put(start, []byte{simple})
			i += 2
			changed = true
			continue
		}
		if e == 'u' {
			r, ok := hex4(raw[i+2:])
			if ok {
				i += 6
				if 0xd800 <= r && r < 0xdc00 && i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2, ok2 := hex4(raw[i+2:]); ok2 && 0xdc00 <= r2 && r2 < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
						i += 6
					}
				}
				n := utf8.EncodeRune(rb[:], r)
				put(start, rb[:n])
				changed = true
				continue
			}
		}
		if e == 'x' && hexEsc && i+3 < len(raw) {
			h, l := hexVal(raw[i+2]), hexVal(raw[i+3])
			if h >= 0 && l >= 0 {
				put(start, []byte{byte(h<<4 | l)})
				i += 4
				changed = true
				continue
			}
		}
		b = append(b, c)
		off = append(off, int32(base+i))
		i++
	}
	off = append(off, int32(base+len(raw)))
	return string(b), off, changed
}

// unescapePercent decodes %XX sequences, and '+' as a space when plus is
// set. ok is false when there is nothing to decode.
func unescapePercent(t string, plus bool) (string, []int32, bool) {
	b := make([]byte, 0, len(t))
	off := make([]int32, 0, len(t)+1)
	changed := false
	for i := 0; i < len(t); {
		if t[i] == '%' && i+2 < len(t) {
			h, l := hexVal(t[i+1]), hexVal(t[i+2])
			if h >= 0 && l >= 0 {
				b = append(b, byte(h<<4|l))
				off = append(off, int32(i))
				i += 3
				changed = true
				continue
			}
		}
		c := t[i]
		if plus && c == '+' {
			c = ' '
			changed = true
		}
		b = append(b, c)
		off = append(off, int32(i))
		i++
	}
	off = append(off, int32(len(t)))
	return string(b), off, changed
}
