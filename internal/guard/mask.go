package guard

import (
	"sort"
	"strings"
)

// Mask returns input with the span of every finding replaced by a marker,
// "[REDACTED:<kind>]" (or "[REDACTED]" where spans of different kinds
// overlap). Findings must come from inspecting input.
//
// Spans of values found in JSON strings lie inside those strings and on
// escape boundaries, and the marker holds no character that needs escaping,
// so a JSON document stays valid. As a safety net, if input is JSON and the
// result is not, every string that holds a finding is replaced whole
// instead.
func Mask(input string, findings []Finding) string {
	if len(findings) == 0 {
		return input
	}
	spans := mergeSpans(input, findings)
	out := replaceSpans(input, spans)
	if looksJSON(input) {
		p := &jparser{s: input}
		if p.parse() && !validJSON(out) {
			return maskLeaves(input, p, spans)
		}
	}
	return out
}

type span struct {
	start, end int
	kind       string
}

func mergeSpans(input string, fs []Finding) []span {
	sp := make([]span, 0, len(fs))
	for _, f := range fs {
		a, b := f.Start, f.End
		if a < 0 {
			a = 0
		}
		if b > len(input) {
			b = len(input)
		}
		if a >= b {
			continue
		}
		sp = append(sp, span{a, b, f.Kind})
	}
	sort.Slice(sp, func(i, j int) bool { return sp[i].start < sp[j].start })
	out := sp[:0]
	for _, s := range sp {
		if n := len(out); n > 0 && s.start < out[n-1].end {
			if s.end > out[n-1].end {
				out[n-1].end = s.end
			}
			if s.kind != out[n-1].kind {
				out[n-1].kind = ""
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func marker(kind string) string {
	if kind == "" || !safeKind(kind) {
		return "[REDACTED]"
	}
	return "[REDACTED:" + kind + "]"
}

func safeKind(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func replaceSpans(input string, spans []span) string {
	var b strings.Builder
	b.Grow(len(input))
	last := 0
	for _, s := range spans {
		b.WriteString(input[last:s.start])
		b.WriteString(marker(s.kind))
		last = s.end
	}
	b.WriteString(input[last:])
	return b.String()
}

// maskLeaves replaces the whole content of every top-level JSON string that
// overlaps a span.
func maskLeaves(input string, p *jparser, spans []span) string {
	var leafSpans []span
	for _, lf := range p.leaves {
		a, b := int(lf.start), int(lf.end)
		for _, s := range spans {
			if s.start < b && a < s.end || s.start == a && a == b {
				leafSpans = append(leafSpans, span{a, b, s.kind})
				break
			}
		}
	}
	return replaceSpans(input, leafSpans)
}

func looksJSON(t string) bool {
	i := 0
	for i < len(t) && isSpace(t[i]) {
		i++
	}
	return i < len(t) && (t[i] == '{' || t[i] == '[')
}
