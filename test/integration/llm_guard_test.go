package integration

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestLLMGuardAndTimeline drives guardrails on LLM prompts and responses
// and the LLM content on the monitor timeline (docs/llm.md "Guardrails and
// the timeline") through a real wardend with a fake OpenAI-compatible and
// a fake Anthropic-compatible server: a secret in a prompt is masked (the
// provider never sees it), a prompt with a card number is blocked with an
// error naming the detector, findings are audited without the value, and
// the prompts and responses (a stream's text too) are on the agent's
// timeline, masked.
func TestLLMGuardAndTimeline(t *testing.T) {
	const (
		providerKey = "sk-it-guard-provider-7f3a"
		awsKey      = "AKIAZ3MSJV4WQXRTY7KD"
		card        = "4539 1488 0343 6467"
	)
	var mu sync.Mutex
	var seen []string // the bodies the providers got
	note := func(r *http.Request) map[string]any {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	oai := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note(r)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-it","choices":[{"index":0,"message":{"role":"assistant","content":"noted, thanks"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`)
	}))
	defer oai.Close()
	ant := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := note(r)
		if body["stream"] != true {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"m0","type":"message","role":"assistant","model":"claude-it","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":1}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","content":[],"model":"claude-it","usage":{"input_tokens":7,"output_tokens":1}}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"streamed "}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"answer"}}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			io.WriteString(w, e+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	defer ant.Close()
	// A webhook receiver that verifies the Standard Webhooks signature.
	hookKey := []byte("it-webhook-signing-key-0123456789")
	type delivery struct {
		Type string `json:"type"`
		Data struct {
			Seq     int64          `json:"seq"`
			Action  string         `json:"action"`
			Outcome string         `json:"outcome"`
			Detail  map[string]any `json:"detail"`
		} `json:"data"`
	}
	var hooks []delivery
	var badHooks int
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		mac := hmac.New(sha256.New, hookKey)
		fmt.Fprintf(mac, "%s.%s.%s", r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), b)
		if r.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
			badHooks++
			w.WriteHeader(401)
			return
		}
		var d delivery
		_ = json.Unmarshal(b, &d)
		hooks = append(hooks, d)
	}))
	defer rcv.Close()

	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	sec, err := admin.PutSecret(ctx, "llm-guard-provider", providerKey)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "llm-guard-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "llm", Scopes: []string{"llm:use"}})
	if err != nil {
		t.Fatal(err)
	}
	hsec, err := admin.PutSecret(ctx, "llm-guard-webhook", "whsec_"+base64.StdEncoding.EncodeToString(hookKey))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []warden.PolicyWrite{
		{ID: "llm-mask-secrets", Scope: warden.PolicyScope{Kind: "installation"},
			Guard: &warden.PolicyGuard{Detectors: []string{"secrets"}, Targets: []string{"llm.prompt"}, Action: "mask"}},
		{ID: "llm-block-pii", Scope: warden.PolicyScope{Kind: "installation"},
			Guard: &warden.PolicyGuard{Detectors: []string{"pii"}, Targets: []string{"llm.prompt"}, Action: "block"}},
	} {
		if _, err := admin.CreatePolicy(ctx, p); err != nil {
			t.Fatalf("policy %s: %v", p.ID, err)
		}
	}
	d.stop(syscall.SIGTERM)

	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	cfg := fmt.Sprintf(`llm:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  providers:
    - {name: openai, kind: openai, base_url: %q, key_secret: %q}
    - {name: anthropic, kind: anthropic, base_url: %q, key_secret: %q}
webhooks:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  endpoints:
    - {name: soc, url: %q, secret: %q, events: ["llm.*"], outcomes: [denied]}
`, oai.URL+"/v1", sec.ID, ant.URL, sec.ID, rcv.URL+"/warden", hsec.ID)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, state, run, "--config", conf)
	admin = d.client(t, d.adminKey)
	call := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", d.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ak.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// A secret in a prompt is masked: the provider never sees it.
	if st, body := call("/llm/openai/v1/chat/completions", `{"model":"gpt-it","messages":[{"role":"user","content":"deploy with `+awsKey+` please"}]}`); st != 200 || !strings.Contains(body, "noted") {
		t.Fatalf("masked prompt: %d %s\n%s", st, body, d.log)
	}
	if st, body := call("/llm/anthropic/v1/messages", `{"model":"claude-it","max_tokens":20,"stream":true,"system":"the key is `+awsKey+`","messages":[{"role":"user","content":"hi"}]}`); st != 200 || !strings.Contains(body, "message_stop") {
		t.Fatalf("masked streamed prompt: %d %s", st, body)
	}
	// A card number is blocked before the call, naming the detector.
	st, body := call("/llm/anthropic/v1/messages", `{"model":"claude-it","max_tokens":20,"messages":[{"role":"user","content":"charge `+card+`"}]}`)
	if st != 403 || !strings.Contains(body, "pii detector") || !strings.Contains(body, "llm-block-pii") || strings.Contains(body, card) {
		t.Fatalf("blocked prompt: %d %s", st, body)
	}
	// The refused call reaches the webhook, signed; the allowed ones,
	// not asked for, do not.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(hooks)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	if badHooks != 0 || len(hooks) != 1 || hooks[0].Type != "llm.call" || hooks[0].Data.Outcome != "denied" || hooks[0].Data.Seq == 0 {
		t.Errorf("webhook deliveries %+v (%d with a bad signature)\n%s", hooks, badHooks, d.log)
	}
	if len(seen) != 2 {
		t.Errorf("the providers got %d calls, want 2 (the blocked one must not reach them)", len(seen))
	}
	for _, b := range seen {
		if strings.Contains(b, awsKey) || strings.Contains(b, strings.ReplaceAll(card, " ", "")) || strings.Contains(b, card) ||
			!strings.Contains(b, "[REDACTED:") || !json.Valid([]byte(b)) {
			t.Errorf("a provider got %s", b)
		}
	}
	mu.Unlock()

	// Findings in the audit log, never the value.
	var masked, blocked int
	for ev, err := range admin.AllAuditEvents(ctx, warden.AuditQuery{Principal: agent.ID}) {
		if err != nil {
			t.Fatalf("%v\n%s", err, d.log)
		}
		if ev.Action != "llm.call" {
			continue
		}
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), awsKey) || strings.Contains(string(b), card) {
			t.Fatalf("a guarded value in the audit log: %s", b)
		}
		switch {
		case ev.Outcome == "success" && ev.Detail["prompt_masked"] == true && strings.Contains(string(b), `"detector":"secrets"`):
			masked++
		case ev.Outcome == "denied" && strings.Contains(string(b), `"detector":"pii"`) && strings.Contains(string(b), `"target":"llm.prompt"`):
			blocked++
		}
	}
	if masked != 2 || blocked != 1 {
		t.Fatalf("audit: %d masked and %d blocked llm.call events, want 2 and 1", masked, blocked)
	}

	// The prompts and responses are on the agent's timeline (written
	// asynchronously: wait for them), masked.
	var evs []warden.MonitorEvent
	deadline = time.Now().Add(20 * time.Second)
	for {
		page, err := admin.ListMonitorEvents(ctx, warden.MonitorQuery{Agent: agent.ID, Kinds: []string{"llm.prompt", "llm.response"}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		evs = page.Events
		if len(evs) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var prompts, responses []string
	for _, e := range evs {
		if strings.Contains(e.Content, awsKey) || e.Source != "llm" {
			t.Fatalf("timeline event %+v", e)
		}
		switch e.Kind {
		case "llm.prompt":
			prompts = append(prompts, e.Content)
		case "llm.response":
			responses = append(responses, e.Content)
		}
	}
	if len(prompts) != 2 || len(responses) != 2 || !strings.Contains(strings.Join(prompts, " "), "[REDACTED:") {
		t.Fatalf("timeline prompts %q responses %q", prompts, responses)
	}
	joined := strings.Join(responses, " ")
	if !strings.Contains(joined, "noted, thanks") || !strings.Contains(joined, "streamed answer") {
		t.Fatalf("timeline responses %q", responses)
	}
}
