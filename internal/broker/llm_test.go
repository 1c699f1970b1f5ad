package broker

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/warden-sandbox/warden/internal/secrets"
)

// fakeMeter records what the broker tells an LLMMeter.
type fakeMeter struct {
	mu      sync.Mutex
	begins  []LLMRequest
	results []LLMResult
	refuse  *LLMRefusal
}

func (m *fakeMeter) Known(host string) bool { return host == apiHost }

func (m *fakeMeter) Begin(_ context.Context, r LLMRequest) (LLMCall, *LLMRefusal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.begins = append(m.begins, r)
	if m.refuse != nil {
		return nil, m.refuse
	}
	return fakeCall{m}, nil
}

type fakeCall struct{ m *fakeMeter }

func (c fakeCall) End(r LLMResult) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.results = append(c.m.results, r)
}

func (m *fakeMeter) seen() ([]LLMRequest, []LLMResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]LLMRequest(nil), m.begins...), append([]LLMResult(nil), m.results...)
}

// Provider answers, as the real APIs send them.
const (
	oaiJSON   = `{"id":"c0","object":"chat.completion","model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`
	oaiStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n" +
		"data: [DONE]\n\n"
	antStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\",\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":4,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// fakeProvider speaks OpenAI chat and Anthropic messages, streams sent
// in pieces with flushes between them.
func fakeProvider(rec *recorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add(seen{Host: r.Host, URL: r.URL.String(), Auth: r.Header.Get("Authorization"), Header: r.Header.Clone(), Body: string(body)})
		var out string
		switch {
		case r.URL.Path == "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"data":[]}`)
			return
		case r.URL.Path == "/v1/messages":
			w.Header().Set("Content-Type", "text/event-stream")
			out = antStream
		case strings.Contains(string(body), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			out = oaiStream
		default:
			w.Header().Set("Content-Type", "application/json")
			out = oaiJSON
		}
		fl := w.(http.Flusher)
		for i := 0; i < len(out); i += 37 {
			io.WriteString(w, out[i:min(i+37, len(out))])
			fl.Flush()
		}
	})
}

// TestLLMMetering: model calls to a known provider over a brokered
// connection are metered from the response's usage fields, streamed or
// not, with the bytes relayed unchanged; a refused call goes nowhere.
func TestLLMMetering(t *testing.T) {
	e := newEnv(t)
	m := &fakeMeter{}
	e.b.cfg.LLM = m
	sec := e.put("openai", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}, EnvName: "OPENAI_API_KEY"})
	rec := &recorder{}
	target, _ := e.upstream(fakeProvider(rec), apiHost)
	c, _ := e.client("sb-1", "agent-1", target, []string{apiHost}, e.sandboxRoots("sb-1"))
	auth := "Bearer " + g.Placeholder
	base := "https://" + apiHost

	// A whole answer; the model is the request's.
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", auth, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
		"Accept-Encoding", "gzip, br")
	if resp.StatusCode != 200 || body != oaiJSON {
		t.Fatalf("chat: %d %q", resp.StatusCode, body)
	}
	if ae := rec.last(t).Header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("upstream Accept-Encoding %q, want identity (the usage is read from a copy)", ae)
	}
	// A stream, relayed byte for byte.
	resp, body = do(t, c, "POST", base+"/v1/chat/completions", auth, `{"messages":[],"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || body != oaiStream {
		t.Fatalf("chat stream: %d\n%q\nwant\n%q", resp.StatusCode, body, oaiStream)
	}
	// Anthropic's stream; its model is the response's when the request
	// body is chunked and long.
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 100<<10) + `"}],"model":"claude-x","stream":true}`
	req, _ := http.NewRequest("POST", base+"/v1/messages", io.NopCloser(strings.NewReader(long))) // no length: chunked
	req.Header.Set("x-api-key", "unused")
	req.Header.Set("Authorization", auth)
	r2, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != 200 || string(b2) != antStream {
		t.Fatalf("messages stream: %d %q", r2.StatusCode, b2)
	}
	// Not a model call: not metered.
	if resp, _ := do(t, c, "GET", base+"/v1/models", auth, ""); resp.StatusCode != 200 {
		t.Fatalf("models: %d", resp.StatusCode)
	}

	begins, results := m.seen()
	if len(begins) != 3 || len(results) != 3 {
		t.Fatalf("meter saw %d begins and %d ends, want 3 (the GET is no model call): %+v", len(begins), len(results), begins)
	}
	if b := begins[0]; b.SandboxID != "sb-1" || b.PrincipalID != "agent-1" || b.Host != apiHost || b.API != "chat" ||
		b.Path != "/v1/chat/completions" || b.ContentLength <= 0 || begins[2].API != "messages" || begins[2].ContentLength != -1 {
		t.Errorf("begins %+v", begins)
	}
	for i, want := range []struct {
		in, out int64
		model   string
		stream  bool
	}{{12, 5, "gpt-4o-mini", false}, {12, 7, "gpt-4o-mini", true}, {24, 9, "claude-x", true}} {
		r := results[i]
		if r.Status != 200 || r.Err != nil || r.Unmetered != "" || r.Usage.In() != want.in || r.Usage.Out() != want.out ||
			r.Model != want.model || r.Stream != want.stream {
			t.Errorf("call %d: %+v (in %d, out %d), want %+v", i, r, r.Usage.In(), r.Usage.Out(), want)
		}
	}

	// A refusal (a spent budget) is answered by the broker: nothing goes
	// upstream.
	m.mu.Lock()
	m.refuse = &LLMRefusal{Status: 429, Body: []byte(`{"error":{"message":"LLM budget \"daily\" is spent","type":"budget_exceeded"}}` + "\n")}
	m.mu.Unlock()
	before := len(rec.all())
	resp, body = do(t, c, "POST", base+"/v1/chat/completions", auth, `{"model":"gpt-4o-mini","messages":[]}`)
	if resp.StatusCode != 429 || !strings.Contains(body, `budget \"daily\" is spent`) || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("refused call: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if n := len(rec.all()); n != before {
		t.Fatalf("a refused call reached the upstream (%d requests, had %d)", n, before)
	}
	if _, results := m.seen(); len(results) != 3 {
		t.Fatalf("a refused call was ended: %+v", results)
	}
}
