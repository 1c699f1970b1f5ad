package llmgw

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
)

const (
	testAWSKey = "AKIAZ3MSJV4WQXRTY7KD"
	testCard   = "4539 1488 0343 6467" // Luhn-valid test number
)

type timelineCapture struct {
	mu  sync.Mutex
	evs []store.MonitorEvent
}

func (c *timelineCapture) RecordLLM(e store.MonitorEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, e)
}

func (c *timelineCapture) all() []store.MonitorEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]store.MonitorEvent(nil), c.evs...)
}

func guardEngine(t *testing.T, guards ...govern.Guard) *govern.Engine {
	t.Helper()
	eng := govern.New(govern.Config{})
	t.Cleanup(eng.Close)
	for i, g := range guards {
		_, err := eng.CreatePolicy(context.Background(), govern.Policy{ID: "guard-" + string(rune('a'+i)),
			Scope: govern.Scope{Kind: govern.ScopeInstallation}, Guard: &g}, "test")
		if err != nil {
			t.Fatal(err)
		}
	}
	return eng
}

func auditJSON(t *testing.T, e *env) string {
	t.Helper()
	var recs []any
	for _, ev := range e.audit.all() {
		rec := map[string]any{"detail": ev.Detail}
		var ds []any
		for _, g := range ev.Governed {
			ds = append(ds, govern.Record(g.Action, g.Decision))
		}
		rec["governed"] = ds
		recs = append(recs, rec)
	}
	b, _ := json.Marshal(recs)
	return string(b)
}

func TestGuardMasksPrompt(t *testing.T) {
	eng := guardEngine(t, govern.Guard{Detectors: []string{"secrets"}, Targets: []string{govern.GuardTargetLLMPrompt}, Action: govern.GuardMask})
	e := newEnv(t, eng, nil)
	tl := &timelineCapture{}
	e.gw.cfg.Timeline = tl
	shapes := []struct{ path, body string }{
		{"/llm/openai/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"my key is ` + testAWSKey + `, use it"}]}`},
		{"/llm/openai/v1/responses", `{"model":"gpt-4o-mini","input":[{"role":"user","content":[{"type":"input_text","text":"key ` + testAWSKey + `"}]}]}`},
		{"/llm/anthropic/v1/messages", `{"model":"claude-x","max_tokens":10,"system":"keep ` + testAWSKey + ` safe","messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, s := range shapes {
		hdr := bearer
		up := &e.oai
		if strings.Contains(s.path, "anthropic") {
			hdr, up = map[string]string{"X-Api-Key": agentKey}, &e.ant
		}
		resp, body := e.post(t, s.path, hdr, s.body)
		up.mu.Lock()
		seen, _ := json.Marshal(up.body)
		up.mu.Unlock()
		if strings.Contains(string(seen), testAWSKey) || !strings.Contains(string(seen), "[REDACTED:") || up.body == nil {
			t.Fatalf("%s: the provider saw %s (client got %d %s)", s.path, seen, resp.StatusCode, body)
		}
		ev := lastAudit(t, e)
		if ev.Detail["prompt_masked"] != true || len(ev.Governed[0].Decision.Findings) == 0 ||
			ev.Governed[0].Decision.Findings[0].Detector != "secrets" || ev.Governed[0].Decision.Findings[0].Target != govern.GuardTargetLLMPrompt {
			t.Fatalf("%s: audit %+v %+v", s.path, ev.Detail, ev.Governed[0].Decision)
		}
	}
	if a := auditJSON(t, e); strings.Contains(a, testAWSKey) {
		t.Fatalf("the secret is in the audit log: %s", a)
	}
	// The timeline holds the masked prompts only.
	var prompts int
	for _, ev := range tl.all() {
		if strings.Contains(ev.Content, testAWSKey) {
			t.Fatalf("the secret is on the timeline: %+v", ev)
		}
		if ev.Kind == EventPrompt {
			prompts++
		}
	}
	if prompts != 3 {
		t.Fatalf("%d prompts on the timeline, want 3: %+v", prompts, tl.all())
	}
}

func TestGuardBlocksPrompt(t *testing.T) {
	eng := guardEngine(t, govern.Guard{Detectors: []string{"secrets"}, Targets: []string{govern.GuardTargetLLMPrompt}, Action: govern.GuardBlock})
	e := newEnv(t, eng, nil)
	resp, body := e.post(t, "/llm/anthropic/v1/messages", map[string]string{"X-Api-Key": agentKey},
		`{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"`+testAWSKey+`"}]}`)
	if resp.StatusCode != 403 || !strings.Contains(body, "secrets detector") || !strings.Contains(body, "llm.prompt") ||
		strings.Contains(body, testAWSKey) {
		t.Fatalf("blocked prompt: %d %s", resp.StatusCode, body)
	}
	if e.ant.calls != 0 {
		t.Fatal("a blocked prompt reached the provider")
	}
	ev := lastAudit(t, e)
	if ev.Outcome != govern.AuditDenied || ev.Governed[0].Decision.Findings[0].Detector != "secrets" {
		t.Fatalf("audit %+v", ev)
	}
	if a := auditJSON(t, e); strings.Contains(a, testAWSKey) {
		t.Fatalf("the secret is in the audit log: %s", a)
	}
	// A clean prompt passes.
	if resp, body := e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("clean prompt: %d %s", resp.StatusCode, body)
	}
}

// leakyGateway is a gateway in front of a provider whose answers hold a
// card number, whole or streamed.
func leakyGateway(t *testing.T, eng *govern.Engine, tl Timeline) (*Gateway, *httptest.Server, *auditCapture) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		if body["stream"] == true {
			sse(w,
				`data: {"choices":[{"index":0,"delta":{"content":"your card: 4539 1488 "}}]}`,
				`data: {"choices":[{"index":0,"delta":{"content":"0343 6467, done"}}]}`,
				`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
				"data: [DONE]")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"your card: `+testCard+`"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	t.Cleanup(up.Close)
	dial, err := safedial.New(safedial.Options{Allow: []string{"127.0.0.1"}, AllowHTTP: true, MaxResponseBytes: -1, MaxRedirects: -1})
	if err != nil {
		t.Fatal(err)
	}
	au := &auditCapture{}
	gw, err := New(Config{LLM: config.LLMConfig{Providers: []config.LLMProvider{{Name: "openai", Kind: "openai", BaseURL: up.URL + "/v1", KeySecret: "k"}}},
		Auth: fakeAuth{}, Govern: eng, Audit: au, Secrets: fakeSecrets{"k": providerKey}, Client: dial.Client(), Timeline: tl})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return gw, srv, au
}

func postChat(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/llm/openai/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestGuardResponses(t *testing.T) {
	digits := strings.ReplaceAll(testCard, " ", "")
	t.Run("mask", func(t *testing.T) {
		eng := guardEngine(t, govern.Guard{Detectors: []string{"pii"}, Targets: []string{govern.GuardTargetLLMResponse}, Action: govern.GuardMask})
		tl := &timelineCapture{}
		_, srv, au := leakyGateway(t, eng, tl)
		code, body := postChat(t, srv.URL, `{"model":"m","messages":[]}`)
		if code != 200 || strings.Contains(body, testCard) || strings.Contains(body, digits) || !strings.Contains(body, "[REDACTED:") || !json.Valid([]byte(body)) {
			t.Fatalf("masked response: %d %s", code, body)
		}
		evs := au.all()
		if len(evs) != 1 || len(evs[0].Governed) != 2 || evs[0].Governed[1].Decision.Findings[0].Target != govern.GuardTargetLLMResponse {
			t.Fatalf("audit %+v", evs)
		}
		var resp *store.MonitorEvent
		for _, e := range tl.all() {
			if e.Kind == EventResponse {
				resp = &e
			}
		}
		if resp == nil || strings.Contains(resp.Content, testCard) || !strings.Contains(resp.Content, "REDACTED") || resp.Agent != "prn_agent" {
			t.Fatalf("timeline response %+v", resp)
		}
	})
	t.Run("block", func(t *testing.T) {
		eng := guardEngine(t, govern.Guard{Detectors: []string{"pii"}, Targets: []string{govern.GuardTargetLLMResponse}, Action: govern.GuardBlock})
		gw, srv, au := leakyGateway(t, eng, nil)
		code, body := postChat(t, srv.URL, `{"model":"m","messages":[]}`)
		if code != 403 || strings.Contains(body, testCard) || !strings.Contains(body, "pii detector") {
			t.Fatalf("blocked response: %d %s", code, body)
		}
		evs := au.all()
		if len(evs) != 1 || evs[0].Outcome != govern.AuditDenied || evs[0].Detail["tokens_out"] != int64(4) {
			t.Fatalf("audit %+v", evs)
		}
		if u := gw.Usage(); len(u) != 1 || u[0].TokensOut != 4 {
			t.Fatalf("a blocked response's tokens were not metered: %+v", u)
		}
	})
	t.Run("stream", func(t *testing.T) {
		eng := guardEngine(t, govern.Guard{Detectors: []string{"pii"}, Targets: []string{govern.GuardTargetLLMResponse}, Action: govern.GuardBlock})
		tl := &timelineCapture{}
		_, srv, au := leakyGateway(t, eng, tl)
		code, body := postChat(t, srv.URL, `{"model":"m","stream":true,"messages":[]}`)
		// A stream cannot be taken back: it went out, and the finding
		// (split across two deltas) is recorded.
		if code != 200 || !strings.Contains(body, "0343 6467") {
			t.Fatalf("stream: %d %s", code, body)
		}
		evs := au.all()
		if len(evs) != 1 || len(evs[0].Governed) != 2 {
			t.Fatalf("audit %+v", evs)
		}
		d := evs[0].Governed[1].Decision
		if d.Outcome != govern.LogOnly || len(d.Findings) == 0 || d.Findings[0].Detector != "pii" || evs[0].Detail["response_guard"] == nil {
			t.Fatalf("stream decision %+v detail %+v", d, evs[0].Detail)
		}
		var text string
		for _, e := range tl.all() {
			if e.Kind == EventResponse {
				text = e.Content
			}
		}
		if text != "your card: "+testCard+", done" {
			t.Fatalf("timeline stream text %q", text)
		}
	})
}

func TestStreamText(t *testing.T) {
	var st streamText
	for _, d := range []string{
		`{"type":"response.output_text.delta","delta":"a"}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"c\""}}`,
		`{"choices":[{"delta":{"content":"d","tool_calls":[{"function":{"arguments":"e"}}]}}]}`,
		`{"type":"message_stop"}`, `[DONE]`, `not json`,
	} {
		st.add([]byte(d))
	}
	if got := st.String(); got != `ab{"c"de` {
		t.Fatalf("stream text %q", got)
	}
}
