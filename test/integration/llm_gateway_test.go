package integration

import (
	"context"
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

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestLLMGateway drives the LLM gateway (docs/llm.md) through a real
// wardend: the provider key from the secrets store reaches a fake
// OpenAI-compatible server on loopback (an allow_hosts exception) and
// nothing else, the agent's Warden key never reaches it, tokens and cost
// land in the audit log, and a budget cuts the agent off with 429.
func TestLLMGateway(t *testing.T) {
	const providerKey = "sk-it-provider-key-5c2e91"
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-it","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}`)
	}))
	defer up.Close()

	// First run: store the provider key and make the agent's key.
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	sec, err := admin.PutSecret(ctx, "openai", providerKey)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "llm-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "llm", Scopes: []string{"llm:use"}})
	if err != nil {
		t.Fatal(err)
	}
	d.stop(syscall.SIGTERM)

	// Second run with the gateway configured.
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	cfg := fmt.Sprintf(`llm:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  providers:
    - {name: openai, kind: openai, base_url: %q, key_secret: %q}
  prices:
    - {model: "gpt-it", input: 2, output: 8}
  budgets:
    - {name: it-daily, principal: %q, period: day, tokens: 200}
`, up.URL+"/v1", sec.ID, agent.ID)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, state, run, "--config", conf)
	admin = d.client(t, d.adminKey)
	call := func(key string) (int, string) {
		req, _ := http.NewRequest("POST", d.url+"/llm/openai/v1/chat/completions", strings.NewReader(`{"model":"gpt-it","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 2 { // 150 tokens each: 0 and 150 used before, under 200
		if st, body := call(ak.Key); st != 200 || !strings.Contains(body, `"content":"ok"`) {
			t.Fatalf("call %d: %d %s\n%s", i, st, body, d.log)
		}
	}
	st, body := call(ak.Key)
	if st != 429 || !strings.Contains(body, `it-daily`) || !strings.Contains(body, "budget_exceeded") {
		t.Fatalf("past the budget: %d %s", st, body)
	}
	// The budget names the agent only: another principal (the admin, whose
	// admin scope implies llm:use) is still served.
	if st, body := call(d.adminKey); st != 200 {
		t.Fatalf("admin: %d %s", st, body)
	}
	mu.Lock()
	for _, h := range seen {
		if h != "Bearer "+providerKey {
			t.Errorf("the upstream got Authorization %q, want the provider key", h)
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d upstream calls, want 3", len(seen))
	}
	mu.Unlock()

	var calls, denied int
	for ev, err := range admin.AllAuditEvents(ctx, warden.AuditQuery{Principal: agent.ID}) {
		if err != nil {
			t.Fatalf("%v\nwardend's log:\n%s", err, d.log)
		}
		if ev.Action != "llm.call" {
			continue
		}
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), providerKey) || strings.Contains(string(b), ak.Key) {
			t.Fatalf("a key in the audit log: %s", b)
		}
		switch ev.Outcome {
		case "success":
			calls++
			// 100 × $2/M + 50 × $8/M = 600 micro-dollars.
			if ev.Detail["tokens_in"] != float64(100) || ev.Detail["tokens_out"] != float64(50) || ev.Detail["cost_micros"] != float64(600) {
				t.Fatalf("audit detail %v", ev.Detail)
			}
		case "denied":
			denied++
			if ev.Detail["budget"] != "it-daily" {
				t.Fatalf("denied audit detail %v", ev.Detail)
			}
		}
	}
	if calls != 2 || denied != 1 {
		t.Fatalf("%d llm.call successes and %d denials audited, want 2 and 1", calls, denied)
	}
	if strings.Contains(d.log.String(), providerKey) {
		t.Fatal("the provider key is in the daemon's log")
	}
}
