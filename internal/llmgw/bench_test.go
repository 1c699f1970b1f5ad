package llmgw

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
)

// benchUpstream answers chat completions: a small JSON body, or with
// "stream": true, SSE chunks of about 250 bytes each (see paced).
func benchUpstream() *httptest.Server {
	chunk := `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 120) + `"},"finish_reason":null}],"usage":null}` + "\n\n"
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			// paced: 200 events 500 µs apart (2,000 events/s, faster than
			// any model generates); else 2,000 events at once.
			n, paced := 2000, strings.Contains(string(b), `"paced":true`)
			if paced {
				n = 200
			}
			for range n {
				io.WriteString(w, chunk)
				fl.Flush() // providers send each event as it is made
				if paced {
					time.Sleep(500 * time.Microsecond)
				}
			}
			io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2000,"total_tokens":2012}}`+"\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
	}))
}

// BenchmarkLLMGateway measures, in one run, a chat completion and a
// stream sent straight to a fake provider and through the gateway (usage
// persisted in SQLite, a budget checked and reserved for every call),
// side by side: p50 latency of the non-streaming call, and throughput of
// the stream. docs/benchmarks.md records the results.
//
//	go test -run '^$' -bench BenchmarkLLMGateway -benchtime 2000x ./internal/llmgw
func BenchmarkLLMGateway(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	st := openStore(b, filepath.Join(b.TempDir(), "warden.db"))
	defer st.Close()
	_, gsrv := usageGW(b, st, up.URL, []config.LLMBudget{{Name: "big", Principal: "*", Period: "day", Tokens: 1 << 60}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	paced := `{"model":"gpt-4o-mini","stream":true,"paced":true,"messages":[{"role":"user","content":"hi"}]}`
	targets := []struct{ name, url string }{
		{"direct", up.URL + "/v1/chat/completions"},
		{"gateway", gsrv.URL + "/llm/openai/v1/chat/completions"},
	}
	do := func(b *testing.B, url, body string) int64 {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agentKey)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %d", url, resp.StatusCode)
		}
		return n
	}
	for _, tg := range targets {
		b.Run("chat/"+tg.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				do(b, tg.url, chat)
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
	for _, tg := range targets {
		b.Run("stream/"+tg.name, func(b *testing.B) {
			var total int64
			t0 := time.Now()
			for b.Loop() {
				total += do(b, tg.url, stream)
			}
			b.ReportMetric(float64(total)/time.Since(t0).Seconds()/1e6, "MB/s")
		})
	}
	for _, tg := range targets {
		b.Run("paced-stream/"+tg.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				do(b, tg.url, paced)
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
