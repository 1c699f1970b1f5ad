package guard

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzInspect: any input is inspected without panics, every span lies in
// the input, and masking a JSON input keeps it valid JSON.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{
		"", "{", `{"a":"b"}`, `["\u00e9\ud83d\ude00", "wdn_Ab3dEf6hIj9kLm2nOp5q"]`, `{"a": "%77dn_Ab3dEf6hIj9kLm2nOp5q"}`,
		`{\"k\": \"v\"}`, "d2RuX0FiM2RFZjZoSWo5a0xtMm5PcDVx", `"\x41\u12"`, "%zz%4", `{"a":{"b":[1,2.5e3,true,null,"x"]}}`,
	} {
		f.Add(s)
	}
	s := NewScanner(tokDetector{})
	f.Fuzz(func(t *testing.T, in string) {
		fs := s.Inspect(in)
		for _, fd := range fs {
			if fd.Start < 0 || fd.End > len(in) || fd.Start >= fd.End {
				t.Fatalf("span [%d,%d) outside input of %d bytes", fd.Start, fd.End, len(in))
			}
		}
		m := Mask(in, fs)
		if json.Valid([]byte(in)) && !json.Valid([]byte(m)) {
			t.Fatalf("masking broke JSON:\n in  %q\n out %q", in, m)
		}
	})
}

// FuzzMaskJSON plants a secret in a JSON document built from fuzz strings,
// in one of several encodings, and checks that the masked document is
// valid JSON and holds the secret in none of its forms.
func FuzzMaskJSON(f *testing.F) {
	f.Add("hello", "world", uint8(0), "Ab3dEf6hIj9kLm2nOp5q")
	f.Add("a\"b\\c", "\u00e9\n", uint8(3), "ZZZZZZZZZZZZZZZZZZZZ")
	f.Add("%41", "\\u0041", uint8(5), "0123456789abcdefghij")
	f.Fuzz(func(t *testing.T, a, b string, enc uint8, body string) {
		// A 20-character alphanumeric body makes a valid secret.
		var sb strings.Builder
		for i := 0; i < len(body) && sb.Len() < 20; i++ {
			c := body[i]
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
				sb.WriteByte(c)
			}
		}
		for sb.Len() < 20 {
			sb.WriteByte('x')
		}
		secret := "wdn_" + sb.String()
		var planted any
		forms := []string{secret}
		switch enc % 6 {
		case 0:
			planted = a + " " + secret + " " + b
		case 1: // JSON inside a string
			inner, _ := json.Marshal(map[string]any{"cmd": a + " " + secret, "n": b})
			planted = string(inner)
		case 2: // base64 of text
			e := base64.StdEncoding.EncodeToString([]byte("KEY=" + secret + "\n"))
			planted, forms = a+" "+e+" "+b, append(forms, e)
		case 3: // URL query
			planted = "https://x.example/?q=" + url.QueryEscape(a) + "&t=" + secret[:6] + "%" + strings.ToUpper(hexByte(secret[6])) + secret[7:]
		case 4: // \u escapes written in the text
			planted = a + ` \u0077dn_` + secret[4:] + " " + b
		case 5: // JSON, twice inside strings
			in1, _ := json.Marshal(map[string]string{"k": secret})
			in2, _ := json.Marshal(map[string]string{"args": string(in1), "b": b})
			planted = string(in2)
		}
		doc, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "params": map[string]any{"name": a, "arguments": map[string]any{"x": []any{b, planted}}}})
		if err != nil {
			t.Skip("unencodable fuzz input")
		}
		fs, err := NewScanner(tokDetector{}).InspectJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		m := Mask(string(doc), fs)
		if !json.Valid([]byte(m)) {
			t.Fatalf("masked JSON invalid: %q", m)
		}
		// Decode the masked document fully and look for the secret in
		// every string, and in the raw bytes.
		var v any
		if err := json.Unmarshal([]byte(m), &v); err != nil {
			t.Fatal(err)
		}
		for _, form := range forms {
			if strings.Contains(m, form) {
				t.Fatalf("masked output holds %q: %q", form, m)
			}
		}
		if again := NewScanner(tokDetector{}).Inspect(m); len(again) != 0 {
			t.Fatalf("masked output still has findings %+v: %q", again, m)
		}
	})
}

func hexByte(c byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[c>>4], h[c&15]})
}
