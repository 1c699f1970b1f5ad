// Package secrets is the credential detector of Warden's guardrails:
// gitleaks' maintained rule set (see rules.go), run behind a keyword
// prefilter, plus an entropy check for generic key=value secrets where the
// key says "secret" (a JSON member such as {"client_secret": "..."} or an
// assignment in text). It implements guard.Detector; the guard.Scanner does
// the decoding (JSON strings, base64, URL and backslash escapes).
package secrets

import (
	"math"
	"strings"
	"sync"

	"github.com/warden-sandbox/warden/internal/guard"
)

// ID is the detector's ID.
const ID = "secrets"

// Detector finds credentials. Build one with New or Default.
type Detector struct {
	rs     *ruleSet
	always []int // rules without keywords
	// needs finds the literals (rule.need) of the always rules in one
	// pass; alwaysNeed[j] is the index in needs of always[j]'s, or -1.
	needs      needIndex
	alwaysNeed []int
	kw         keywordIndex
	// ruleKW[i] lists the keyword ids of rule i.
	ruleKW [][]int
}

var (
	defaultOnce sync.Once
	defaultDet  *Detector
	defaultErr  error
)

// Default returns the detector over the embedded gitleaks rules. The rules
// are compiled once, on first use.
func Default() (*Detector, error) {
	defaultOnce.Do(func() { defaultDet, defaultErr = New(gitleaksTOML) })
	return defaultDet, defaultErr
}

// New builds a detector over a gitleaks TOML configuration.
func New(config []byte) (*Detector, error) {
	rs, err := parseRules(config)
	if err != nil {
		return nil, err
	}
	rs.rules = append(rs.rules, extraRules()...)
	d := &Detector{rs: rs}
	ids := map[string]int{}
	var words []string
	for i, r := range rs.rules {
		if len(r.keywords) == 0 {
			d.always = append(d.always, i)
			d.ruleKW = append(d.ruleKW, nil)
			continue
		}
		var kids []int
		for _, k := range r.keywords {
			id, ok := ids[k]
			if !ok {
				id = len(words)
				ids[k] = id
				words = append(words, k)
			}
			kids = append(kids, id)
		}
		d.ruleKW = append(d.ruleKW, kids)
	}
	for _, w := range genericKeyWords {
		if _, ok := ids[w]; !ok {
			ids[w] = len(words)
			words = append(words, w)
		}
	}
	d.kw = newKeywordIndex(words)
	var needs []string
	for _, i := range d.always {
		j := -1
		if n := d.rs.rules[i].need; len(n) >= 2 {
			j = len(needs)
			needs = append(needs, n)
		}
		d.alwaysNeed = append(d.alwaysNeed, j)
	}
	d.needs = newNeedIndex(needs)
	return d, nil
}

// needIndex says which of a set of literals (two bytes or more) a text
// holds, as strings.Contains would, in one pass: a table of their first
// two bytes rejects most positions with one lookup.
type needIndex struct {
	lits   []string
	pairs  [65536 / 64]uint64
	starts map[uint16][]int
}

func newNeedIndex(lits []string) needIndex {
	x := needIndex{lits: lits, starts: map[uint16][]int{}}
	for i, l := range lits {
		p := uint16(l[0])<<8 | uint16(l[1])
		x.pairs[p/64] |= 1 << (p % 64)
		x.starts[p] = append(x.starts[p], i)
	}
	return x
}

// scan sets found[i] when t holds lits[i].
func (x *needIndex) scan(t string, found []bool) {
	for i := 0; i+1 < len(t); i++ {
		p := uint16(t[i])<<8 | uint16(t[i+1])
		if x.pairs[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		for _, j := range x.starts[p] {
			if !found[j] && strings.HasPrefix(t[i:], x.lits[j]) {
				found[j] = true
			}
		}
	}
}

// Rules returns the number of rules.
func (d *Detector) Rules() int { return len(d.rs.rules) }

// ID implements guard.Detector.
func (d *Detector) ID() string { return ID }

// Detect implements guard.Detector.
func (d *Detector) Detect(in guard.Input, out []guard.Match) []guard.Match {
	t := in.Text
	if len(t) < 8 {
		return out
	}
	var seenBuf [256]bool
	seen := seenBuf[:0]
	if n := len(d.kw.words); n <= len(seenBuf) {
		seen = seenBuf[:n]
	} else {
		seen = make([]bool, n)
	}
	any := d.kw.scan(t, seen)
	var needBuf [64]bool
	need := needBuf[:0]
	if n := len(d.needs.lits); n <= len(needBuf) {
		need = needBuf[:n]
	} else {
		need = make([]bool, n)
	}
	d.needs.scan(t, need)
	start := len(out)
	for j, i := range d.always {
		if k := d.alwaysNeed[j]; k >= 0 && !need[k] {
			continue // apply would find the literal missing
		}
		out = d.apply(d.rs.rules[i], t, out)
	}
	if any {
		for i, kids := range d.ruleKW {
			for _, k := range kids {
				if seen[k] {
					out = d.apply(d.rs.rules[i], t, out)
					break
				}
			}
		}
	}
	if len(out) == start {
		out = genericKeyed(in, out)
	}
	return dedupe(out, start)
}

// dedupe merges overlapping matches of several rules, keeping the longer
// one (the first when they are as long: gitleaks' rules come before ours).
func dedupe(out []guard.Match, start int) []guard.Match {
	if len(out)-start < 2 {
		return out
	}
	w := start
	for i := start; i < len(out); i++ {
		dup := false
		for j := start; j < w; j++ {
			if out[j].Start < out[i].End && out[i].Start < out[j].End {
				dup = true
				if out[i].End-out[i].Start > out[j].End-out[j].Start {
					out[j] = out[i]
				}
				break
			}
		}
		if !dup {
			out[w] = out[i]
			w++
		}
	}
	return out[:w]
}

// apply runs one rule over t.
func (d *Detector) apply(r *rule, t string, out []guard.Match) []guard.Match {
	if r.need != "" && !strings.Contains(t, r.need) || r.pre != nil && !r.pre(t) {
		return out
	}
	if r.scan != nil {
		for _, sp := range r.scan(t) {
			if !d.allowed(r, t[sp[0]:sp[1]], t[sp[0]:sp[1]], "") {
				out = append(out, guard.Match{Kind: r.id, Start: sp[0], End: sp[1], Confidence: 0.7})
			}
		}
		return out
	}
	for _, m := range r.re.FindAllStringSubmatchIndex(t, -1) {
		ms, me := m[0], m[1]
		ss, se := ms, me
		if r.secretGroup > 0 {
			ss, se = m[2*r.secretGroup], m[2*r.secretGroup+1]
		} else {
			for g := 1; 2*g+1 < len(m); g++ {
				if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
					ss, se = m[2*g], m[2*g+1]
					break
				}
			}
		}
		if ss < 0 || se <= ss {
			continue
		}
		secret, match := t[ss:se], t[ms:me]
		if r.entropy > 0 {
			if entropy(secret) <= r.entropy {
				continue
			}
			if r.generic && !strings.ContainsAny(secret, "0123456789") {
				continue
			}
		}
		if r.check != nil && !r.check(secret) {
			continue
		}
		if d.allowed(r, secret, match, lineOf(t, ms, me)) {
			continue
		}
		out = append(out, guard.Match{Kind: r.id, Start: ss, End: se, Confidence: confidence(r)})
	}
	return out
}

func confidence(r *rule) float64 {
	switch {
	case r.generic:
		return 0.6
	case r.entropy > 0:
		return 0.9
	}
	return 0.8
}

func (d *Detector) allowed(r *rule, secret, match, line string) bool {
	if isPlaceholder(secret) || vetoed(r, secret, match) {
		return true
	}
	for i := range d.rs.global {
		if d.rs.global[i].allowed(secret, match, line) {
			return true
		}
	}
	for i := range r.allow {
		if r.allow[i].allowed(secret, match, line) {
			return true
		}
	}
	return false
}

func lineOf(t string, a, b int) string {
	s := strings.LastIndexByte(t[:a], '\n') + 1
	e := strings.IndexByte(t[b:], '\n')
	if e < 0 {
		return t[s:]
	}
	return t[s : b+e]
}

// entropy is the Shannon entropy of s in bits per byte.
func entropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	var e float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			e -= p * math.Log2(p)
		}
	}
	return e
}

// keywordIndex finds keywords, ignoring ASCII case, with a two-byte
// prefix table: most positions of a text are rejected by one lookup.
type keywordIndex struct {
	words  []string
	bitmap [65536 / 64]uint64
	// buckets[p] lists the keywords starting with the two lower-case
	// bytes p; bucket maps p to its index (0: none), so that a hit costs
	// two array lookups, not a map lookup.
	bucket  [65536]uint8
	buckets [][]int
	short   []int            // one-byte keywords
	big     map[uint16][]int // when there are more than 255 prefixes
}

func newKeywordIndex(words []string) keywordIndex {
	k := keywordIndex{words: words, buckets: [][]int{nil}, big: map[uint16][]int{}}
	for i, w := range words {
		if len(w) < 2 {
			k.short = append(k.short, i)
			continue
		}
		p := uint16(lower(w[0]))<<8 | uint16(lower(w[1]))
		k.bitmap[p/64] |= 1 << (p % 64)
		k.big[p] = append(k.big[p], i)
	}
	if len(k.big) < 256 {
		for p, ws := range k.big {
			k.bucket[p] = uint8(len(k.buckets))
			k.buckets = append(k.buckets, ws)
		}
		k.big = nil
	}
	return k
}

// candidates returns the keywords starting with the two bytes p.
func (k *keywordIndex) candidates(p uint16) []int {
	if k.big != nil {
		return k.big[p]
	}
	return k.buckets[k.bucket[p]]
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 32
	}
	return c
}

// scan marks in seen the keywords t holds and reports whether any does.
func (k *keywordIndex) scan(t string, seen []bool) bool {
	any := false
	for _, i := range k.short {
		if strings.Contains(strings.ToLower(t), k.words[i]) {
			seen[i], any = true, true
		}
	}
	for i := 0; i+1 < len(t); i++ {
		p := uint16(lower(t[i]))<<8 | uint16(lower(t[i+1]))
		if k.bitmap[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		for _, w := range k.candidates(p) {
			if seen[w] {
				continue
			}
			if hasPrefixFold(t[i:], k.words[w]) {
				seen[w], any = true, true
			}
		}
	}
	return any
}

func hasPrefixFold(s, lowerPrefix string) bool {
	if len(s) < len(lowerPrefix) {
		return false
	}
	for i := 0; i < len(lowerPrefix); i++ {
		if lower(s[i]) != lowerPrefix[i] {
			return false
		}
	}
	return true
}
