// Package guard is the content-inspection layer of Warden's guardrails: a
// detector interface, the decoding layer every detector runs over, and a
// masker.
//
// A Detector looks at one plain string. The Scanner feeds it decoded
// strings: the string values of a JSON document (walking nested objects and
// arrays, and strings that themselves hold JSON), base64 runs that decode to
// printable text (standard and URL alphabets), percent-encoded text and
// backslash escapes (\n, \uXXXX, \xNN). So a secret in a JSON string, in
// function-call "arguments" serialised into a string, in a Kubernetes Secret's
// base64 data or in a URL query is found all the same. Each finding is mapped
// back to the byte span in the original input that holds it: exactly where
// the decoding allows it (JSON and backslash escapes, percent-encoding), and
// to the whole encoded token otherwise (base64).
//
// Findings never carry the matched value, so that they can be logged.
package guard

import (
	"sort"
)

// Input is one decoded string handed to a detector.
type Input struct {
	// Text is the decoded string.
	Text string
	// Key is the name of the JSON object member that holds Text, or ""
	// (plain text, array elements). Detectors may use it as context, like
	// the "password" in {"password": "..."}.
	Key string
}

// Match is one hit of a detector in Input.Text.
type Match struct {
	// Kind names what was found, for example "github-pat" or "iban".
	Kind string
	// Start and End are byte offsets in Input.Text.
	Start, End int
	// Confidence is in (0, 1].
	Confidence float64
}

// Detector inspects decoded strings.
//
// Detect appends its matches for in to out and returns the result. It must
// be safe for concurrent use and must not keep in.Text.
type Detector interface {
	ID() string
	Detect(in Input, out []Match) []Match
}

// Finding is one match mapped back to the inspected input.
type Finding struct {
	// Detector is the ID of the detector that reported it.
	Detector string `json:"detector"`
	// Kind is the detector's kind, for example "aws-access-token" or "iban".
	Kind string `json:"kind"`
	// Start and End are byte offsets in the inspected input. When Exact is
	// false they cover the encoded token that holds the value (a base64 run),
	// which is the smallest span of the input that is known to contain it.
	Start int  `json:"start"`
	End   int  `json:"end"`
	Exact bool `json:"exact"`
	// Path is the JSON path of the string that holds the value, when the
	// input (or a string decoded from it) is JSON, for example
	// "params.arguments.env[2]". A JSON document inside a string continues
	// the path of that string.
	Path string `json:"path,omitempty"`
	// Encoding is the chain of decodings that revealed the value, outermost
	// first, for example "json>json>base64"; "" means plain text.
	Encoding string `json:"encoding,omitempty"`
	// Confidence is in (0, 1].
	Confidence float64 `json:"confidence"`
}

// Default limits of a Scanner.
const (
	// DefaultMaxDepth bounds how many decodings are stacked (JSON in a
	// string in base64 ...).
	DefaultMaxDepth = 4
	// minBase64 is the shortest base64 run that is decoded.
	minBase64 = 16
)

// Scanner runs detectors over an input and its decoded forms. The zero value
// with Detectors set is ready to use; a Scanner is safe for concurrent use.
type Scanner struct {
	Detectors []Detector
	// MaxDepth bounds stacked decodings; 0 means DefaultMaxDepth.
	MaxDepth int
	// MaxDecoded bounds the decoded bytes produced for one input (base64,
	// percent and escape decoding), as a multiple of the input size; 0 means
	// 4. It keeps crafted inputs from multiplying the work.
	MaxDecoded int
}

// NewScanner returns a Scanner over ds.
func NewScanner(ds ...Detector) *Scanner { return &Scanner{Detectors: ds} }

// Inspect inspects data: as JSON when it is a JSON object or array, as
// text otherwise. Findings are sorted by Start and deduplicated.
func (s *Scanner) Inspect(data string) []Finding {
	st := s.newState(len(data))
	st.inspect(&seg{text: data}, "", 0)
	return st.finish()
}

// InspectText inspects data as text (it still decodes what it finds in it,
// JSON documents included when the whole text is one).
func (s *Scanner) InspectText(data string) []Finding { return s.Inspect(data) }

// InspectJSON inspects a JSON value: only its string values (and what they
// decode to) are inspected, each with the name of its member as the key.
// It reports ErrNotJSON when data is not valid JSON.
func (s *Scanner) InspectJSON(data []byte) ([]Finding, error) {
	p := &jparser{s: string(data)}
	if !p.parse() {
		return nil, ErrNotJSON
	}
	st := s.newState(len(data))
	st.walkJSON(&seg{text: p.s}, p, 0)
	return st.finish(), nil
}

type errString string

func (e errString) Error() string { return string(e) }

// ErrNotJSON is returned by InspectJSON for input that is not JSON.
const ErrNotJSON = errString("guard: input is not valid json")

// state is the per-call scratch of a Scanner.
type state struct {
	s        *Scanner
	maxDepth int
	budget   int // decoded bytes left
	matches  []Match
	out      []Finding
	doc      docCtx // the JSON string being inspected, for paths
}

func (s *Scanner) newState(n int) *state {
	d := s.MaxDepth
	if d <= 0 {
		d = DefaultMaxDepth
	}
	m := s.MaxDecoded
	if m <= 0 {
		m = 4
	}
	return &state{s: s, maxDepth: d, budget: m*n + 4096}
}

func (st *state) finish() []Finding {
	out := st.out
	if len(out) < 2 {
		return out
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		if out[i].End != out[j].End {
			return out[i].End < out[j].End
		}
		return out[i].Kind < out[j].Kind
	})
	w := 1
	for i := 1; i < len(out); i++ {
		p, f := out[w-1], out[i]
		if f.Start == p.Start && f.End == p.End && f.Kind == p.Kind && f.Detector == p.Detector {
			if f.Confidence > p.Confidence {
				out[w-1].Confidence = f.Confidence
			}
			continue
		}
		out[w] = f
		w++
	}
	return out[:w]
}

func (st *state) detect(g *seg, key string) {
	if g.text == "" {
		return
	}
	in := Input{Text: g.text, Key: key}
	for _, d := range st.s.Detectors {
		st.matches = d.Detect(in, st.matches[:0])
		if len(st.matches) == 0 {
			continue
		}
		id := d.ID()
		for _, m := range st.matches {
			if m.Start < 0 || m.End > len(g.text) || m.Start >= m.End {
				continue
			}
			a, b, exact := g.toRoot(m.Start, m.End)
			st.out = append(st.out, Finding{
				Detector: id, Kind: m.Kind, Start: a, End: b, Exact: exact,
				Path: st.curPath(), Encoding: g.encoding(), Confidence: m.Confidence,
			})
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}
