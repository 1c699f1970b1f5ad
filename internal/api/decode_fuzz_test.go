package api

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/api/apierr"
)

// FuzzDecodeJSON feeds arbitrary bodies to the strict request decoder: it
// must never panic, and every refusal must be a 4xx API error.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"template":"base","memory_mb":512}`, `{"memory_mb":-1}`, `{"memory_mb":"512"}`,
		`{"env":{"A":"B"},"metadata":{"k":"v"}}`, `[]`, `null`, `{"a":1}`, `{"template":"base"} x`,
		"{\"template\":\"\xff\"}", `{"timeout_seconds":1e400}`, `{"Template":"base"}`, `{"template":"a","template":"b"}`,
		`{"cmd":["ls","-l"],"cwd":"/tmp"}`, `{"cmd":[1,2]}`, strings.Repeat(`{"a":`, 1000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&createSandboxRequest{}, &struct {
			Cmd     []string          `json:"cmd"`
			Command string            `json:"command"`
			Env     map[string]string `json:"env"`
			Cwd     string            `json:"cwd"`
		}{}} {
			r := httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body))
			err := decodeJSON(r, v, true)
			if err == nil {
				continue
			}
			var ae *apierr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("decode error is not an API error: %v", err)
			}
			if st := apierr.Status(ae.Code); st < 400 || st >= 500 {
				t.Fatalf("decode error %q has status %d", ae.Code, st)
			}
		}
	})
}

// FuzzCheckPath: accepted paths are absolute, clean and free of control bytes.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/", "/home/user/a.txt", "../etc/passwd", "/a/../b", "/a/./b", "a", "/a\x00b", "//x", "/" + strings.Repeat("a", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath("path", p) != nil {
			return
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.ContainsRune(p, 0) {
			t.Fatalf("accepted unsafe path %q", p)
		}
	})
}
