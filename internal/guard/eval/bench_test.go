package eval

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/guard"
	"github.com/warden-sandbox/warden/internal/guard/pii"
	"github.com/warden-sandbox/warden/internal/guard/secrets"
)

// toolCall4K is an MCP tools/call request body of about 4 KiB with nested
// arguments: a file write with source text, an options object, an array of
// environment entries, a nested patch list and a JSON document serialised
// into a string, as agents send them. It holds no secret or PII, which is
// the common case and the one that must be cheap.
func toolCall4K() []byte {
	src := strings.Repeat("func handle(w http.ResponseWriter, r *http.Request) {\n\tif err := r.ParseForm(); err != nil {\n\t\thttp.Error(w, err.Error(), 400)\n\t\treturn\n\t}\n\tfmt.Fprintf(w, \"ok %s\\n\", r.Form.Get(\"name\"))\n}\n\n", 14)
	inner, _ := json.Marshal(map[string]any{"query": "select id, name, created_at from orders where status = 'open' order by created_at desc limit 50", "params": []any{"open", 50}, "timeout_ms": 3000})
	args := map[string]any{
		"path":    "/workspace/service/handlers/orders.go",
		"content": src,
		"options": map[string]any{"create_dirs": true, "mode": "0644", "encoding": "utf-8", "backup": map[string]any{"enabled": false, "suffix": ".bak"}},
		"env":     []any{map[string]any{"name": "LOG_LEVEL", "value": "info"}, map[string]any{"name": "REGION", "value": "eu-west-1"}, map[string]any{"name": "FEATURE_FLAGS", "value": "search,v2-checkout"}},
		"patches": []any{
			map[string]any{"op": "replace", "path": "/spec/replicas", "value": 3},
			map[string]any{"op": "add", "path": "/metadata/labels/team", "value": "payments"},
			map[string]any{"op": "add", "path": "/spec/template/spec/containers/0/image", "value": "ghcr.io/acme/orders:1.14.2"},
		},
		"sql":         string(inner),
		"description": "Rewrite the orders handler to validate the form first, then run the query with a three second timeout and report progress to the tracking issue once the deployment has rolled out to every region.",
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": map[string]any{"name": "fs.write_file", "arguments": args, "_meta": map[string]any{"progressToken": "tok-7781"}}})
	return body
}

func builtinScanner(tb testing.TB) *guard.Scanner {
	d, err := secrets.Default()
	if err != nil {
		tb.Fatal(err)
	}
	return guard.NewScanner(d, pii.New())
}

// p50 runs f n times and reports the median duration in microseconds.
func p50(b *testing.B, f func()) {
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		f()
		ds = append(ds, time.Since(t))
	}
	b.StopTimer()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkGuardToolCall4K: all built-in detectors (secrets and PII) over
// the 4 KiB tool call, decoding included. Compare with
// BenchmarkJSONUnmarshalToolCall4K.
func BenchmarkGuardToolCall4K(b *testing.B) {
	body := toolCall4K()
	s := builtinScanner(b)
	if fs, err := s.InspectJSON(body); err != nil || len(fs) != 0 {
		b.Fatalf("benign payload: %v %+v", err, fs)
	}
	b.SetBytes(int64(len(body)))
	p50(b, func() {
		if _, err := s.InspectJSON(body); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkJSONUnmarshalToolCall4K: a plain decode of the same payload.
func BenchmarkJSONUnmarshalToolCall4K(b *testing.B) {
	body := toolCall4K()
	b.SetBytes(int64(len(body)))
	p50(b, func() {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	})
}

func TestToolCall4KSize(t *testing.T) {
	if n := len(toolCall4K()); n < 3800 || n > 4400 {
		t.Fatalf("payload is %d bytes, want about 4 KiB", n)
	}
}
