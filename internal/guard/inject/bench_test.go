package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// toolResult4K is an MCP tools/call result of just over 4 KiB holding JSON
// search results (valid JSON, escaped inside the text content).
func toolResult4K(tb testing.TB) string {
	tb.Helper()
	type item struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Snippet string `json:"snippet"`
		Score   float64
	}
	var items []item
	for i := 0; ; i++ {
		items = append(items, item{
			Title:   fmt.Sprintf("Release notes %d.%d", i/10, i%10),
			URL:     fmt.Sprintf("https://docs.example.com/releases/%d", i),
			Snippet: "The scheduler now retries failed jobs with exponential backoff; the default timeout is 30 seconds and can be changed in config.yaml.",
			Score:   1 / float64(i+1),
		})
		inner, _ := json.Marshal(map[string]any{"results": items})
		res, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "result": map[string]any{
			"content": []map[string]any{{"type": "text", "text": string(inner)}}, "isError": false}})
		if len(res) >= 4096 {
			return string(res)
		}
	}
}

// BenchmarkClassifier4KiB: the classifier alone on a 4 KiB JSON tool result.
func BenchmarkClassifier4KiB(b *testing.B) {
	m, err := DefaultModel()
	if err != nil {
		b.Fatal(err)
	}
	text := toolResult4K(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		m.Score(text)
	}
}

// BenchmarkDetector4KiB: classifier and heuristics on the same payload.
func BenchmarkDetector4KiB(b *testing.B) {
	d := New(Options{})
	text := toolResult4K(b)
	ctx := context.Background()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := d.Inspect(ctx, text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONDecode4KiB is the yardstick: a plain JSON decode of the
// same payload.
func BenchmarkJSONDecode4KiB(b *testing.B) {
	text := toolResult4K(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			b.Fatal(err)
		}
	}
}
