package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTracingConfig: the tracing block loads; off unless enabled or an
// endpoint is set; bad endpoints, credentials in the URL, ratios and
// header names are refused (without quoting the credentials).
func TestTracingConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name+".yaml")
		os.WriteFile(p, []byte("version: 1\n"+body), 0o600)
		return p
	}
	c, err := load(t, []string{"--config", write("ok", "tracing:\n  endpoint: http://col:4318\n  headers: {X-Auth: t}\n  service_name: w\n  sample_ratio: 0.5\n  timeout: 3s\n")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr := c.Tracing; !tr.On() || tr.Endpoint != "http://col:4318" || tr.Headers["X-Auth"] != "t" || *tr.SampleRatio != 0.5 || tr.ServiceName != "w" {
		t.Fatalf("tracing %+v", tr)
	}
	if c, err := load(t, nil, nil); err != nil || c.Tracing.On() {
		t.Fatalf("default tracing on: %+v %v", c.Tracing, err)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"no scheme":     {"tracing: {endpoint: \"col:4318\"}\n", "tracing.endpoint"},
		"credentials":   {"tracing: {endpoint: \"http://u:hunter2@col:4318\"}\n", "credentials"},
		"no scheme, @":  {"tracing: {endpoint: \"u:hunter2@col:4318\"}\n", "tracing.endpoint"},
		"ratio":         {"tracing: {enabled: true, sample_ratio: 1.5}\n", "sample_ratio"},
		"header name":   {"tracing: {enabled: true, headers: {\"a b\": x}}\n", "tracing.headers"},
		"unknown field": {"tracing: {endpiont: x}\n", "endpiont"},
	} {
		_, err := load(t, []string{"--config", write(strings.ReplaceAll(name, " ", "_"), tc.body)}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %v, want one about %q", name, err, tc.want)
		}
	}
}
