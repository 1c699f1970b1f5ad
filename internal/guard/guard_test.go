package guard

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// tokDetector finds "wdn_" and 20 letters or digits: a stand-in secret.
type tokDetector struct{}

var tokRe = regexp.MustCompile(`wdn_[A-Za-z0-9]{20}`)

func (tokDetector) ID() string { return "tok" }
func (tokDetector) Detect(in Input, out []Match) []Match {
	for _, m := range tokRe.FindAllStringIndex(in.Text, -1) {
		out = append(out, Match{Kind: "tok", Start: m[0], End: m[1], Confidence: 1})
	}
	return out
}

const tok = "wdn_Ab3dEf6hIj9kLm2nOp5q"

func jsonStr(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestDecodingsFindAndMap(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("TOKEN=" + tok + "\n"))
	b64url := base64.RawURLEncoding.EncodeToString([]byte("{\"k\":\"" + tok + "\"}"))
	inner := `{"command": "export T=` + tok + `"}`
	cases := []struct {
		name, in, enc, path string
		exact               bool
		want                string // the input text the span must cover ("" = tok)
	}{
		{"plain", "use " + tok + " now", "", "", true, ""},
		{"json", `{"a": {"b": ["x", "` + tok + `"]}}`, "json", "a.b[1]", true, ""},
		{"json escapes", `{"a": "` + `wdn_Ab3dEf6hIj9kLm2nOp5\u0071` + `"}`, "json", "a", true, `wdn_Ab3dEf6hIj9kLm2nOp5\u0071`},
		{"double json", `{"tool_calls": [{"function": {"arguments": ` + jsonStr(inner) + `}}]}`, "json>json", "tool_calls[0].function.arguments.command", true, ""},
		{"base64", `{"data": "` + b64 + `"}`, "json>base64", "data", false, b64},
		{"base64 url", "blob " + b64url + " end", "base64>json", "k", false, b64url},
		{"percent", "GET /cb?token=wdn_Ab3dEf6hIj9kLm2nOp5%71&x=1", "url", "", true, "wdn_Ab3dEf6hIj9kLm2nOp5%71"},
		{"backslash text", `{\"k\": \"\u0077dn_Ab3dEf6hIj9kLm2nOp5q\"}`, "escape>json", "k", true, `\u0077dn_Ab3dEf6hIj9kLm2nOp5q`},
		{"hex escape", `s = "\x77dn_Ab3dEf6hIj9kLm2nOp5q"`, "escape", "", true, `\x77dn_Ab3dEf6hIj9kLm2nOp5q`},
	}
	s := NewScanner(tokDetector{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := s.Inspect(c.in)
			if len(fs) == 0 {
				t.Fatalf("not found in %q", c.in)
			}
			f := fs[0]
			want := c.want
			if want == "" {
				want = tok
			}
			if got := c.in[f.Start:f.End]; got != want || f.Exact != c.exact {
				t.Errorf("span %q exact=%v, want %q exact=%v", got, f.Exact, want, c.exact)
			}
			if f.Encoding != c.enc || f.Path != c.path {
				t.Errorf("encoding %q path %q, want %q %q", f.Encoding, f.Path, c.enc, c.path)
			}
			m := Mask(c.in, fs)
			if strings.Contains(m, tok) || strings.Contains(m, want) {
				t.Errorf("masked output still holds the value: %q", m)
			}
			if json.Valid([]byte(c.in)) && !json.Valid([]byte(m)) {
				t.Errorf("masked JSON invalid: %q", m)
			}
		})
	}
}

func TestBase64NotTextIgnored(t *testing.T) {
	// Random bytes in base64 are not decoded into findings.
	raw := make([]byte, 48)
	for i := range raw {
		raw[i] = byte(i*37 + 11)
	}
	in := base64.StdEncoding.EncodeToString(raw)
	if fs := NewScanner(tokDetector{}).Inspect(in); len(fs) != 0 {
		t.Fatalf("findings in binary base64: %+v", fs)
	}
}

func TestInspectJSONRejectsText(t *testing.T) {
	if _, err := NewScanner(tokDetector{}).InspectJSON([]byte("not json " + tok)); err != ErrNotJSON {
		t.Fatalf("err = %v, want ErrNotJSON", err)
	}
	fs, err := NewScanner(tokDetector{}).InspectJSON([]byte(jsonStr(tok)))
	if err != nil || len(fs) != 1 {
		t.Fatalf("json string: %v %+v", err, fs)
	}
}

func TestDepthBound(t *testing.T) {
	// Nested encodings beyond MaxDepth are not decoded; within it they are.
	v := tok
	for i := 0; i < 3; i++ {
		v = base64.StdEncoding.EncodeToString([]byte("x " + v + " y"))
	}
	if fs := NewScanner(tokDetector{}).Inspect(v); len(fs) != 1 {
		t.Fatalf("depth 3: %d findings", len(fs))
	}
	s := &Scanner{Detectors: []Detector{tokDetector{}}, MaxDepth: 2}
	if fs := s.Inspect(v); len(fs) != 0 {
		t.Fatalf("MaxDepth 2 decoded 3 layers: %+v", fs)
	}
}

func TestMaskOverlapsAndText(t *testing.T) {
	in := "a " + tok + " b " + tok
	fs := NewScanner(tokDetector{}).Inspect(in)
	if len(fs) != 2 {
		t.Fatalf("findings %d", len(fs))
	}
	fs = append(fs, Finding{Kind: "other", Start: fs[0].Start + 2, End: fs[0].End + 1})
	m := Mask(in, fs)
	if m != "a [REDACTED]b [REDACTED:tok]" {
		t.Fatalf("masked %q", m)
	}
}
