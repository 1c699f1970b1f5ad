package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestLLMUsageBySandbox: a hosted-agent run's sandbox calls a model twice,
// once through the LLM gateway at warden.internal and once straight to a
// provider host (a known one: llm.egress_hosts) through the egress broker
// with a brokered key; GET /v1/usage?group_by=sandbox reports both calls'
// tokens and cost for that sandbox, the direct call audited as llm.call
// via egress. The provider host is the fake internet of
// TestSecretSwapEndToEnd; nothing leaves the machine.
func TestLLMUsageBySandbox(t *testing.T) {
	up := newFakeUpstream(t)
	const direct = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-meter-direct\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-meter-direct\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":7,\"total_tokens\":37}}\n\n" +
		"data: [DONE]\n\n"
	up.mu.Lock()
	up.routes = map[string]http.Handler{"/v1/chat/completions": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range strings.SplitAfter(direct, "\n\n") {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	})}
	up.mu.Unlock()
	// The gateway's provider, on this host.
	gwUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-meter","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
	}))
	defer gwUp.Close()

	state, run := newDirs(t)
	env := []string{"SSL_CERT_FILE=" + up.caFile}
	d := startDaemonEnv(t, state, run, env)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	provKey, err := c.PutSecret(ctx, "gw-provider", "sk-gateway-provider-key")
	if err != nil {
		t.Fatal(err)
	}
	d.stop(syscall.SIGTERM)
	conf := filepath.Join(t.TempDir(), "wardend.yaml")
	cfg := fmt.Sprintf(`version: 1
network:
  dns_upstream: "192.175.48.53"
llm:
  allow_hosts: ["127.0.0.1"]
  allow_http: true
  egress_hosts: ["api.example.test"]
  providers:
    - {name: openai, kind: openai, base_url: %q, key_secret: %q}
  prices:
    - {model: "gpt-meter*", input: 2, output: 8}
`, gwUp.URL+"/v1", provKey.ID)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemonEnv(t, state, run, env, "--config", conf)
	c = d.client(t, d.adminKey)
	ctx = ctxT(t)

	script := `KEY="$(sed -n 's/.*"key":"\([^"]*\)".*/\1/p' "$WARDEN_RUN_INPUT_FILE")"
curl -sS --max-time 20 -H "Authorization: Bearer $WARDEN_API_KEY" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-meter","messages":[{"role":"user","content":"hi"}]}' "$WARDEN_URL/llm/openai/v1/chat/completions"; echo
curl -sS --max-time 20 --cacert /etc/ssl/warden-ca-bundle.pem -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-meter-direct","stream":true,"stream_options":{"include_usage":true},"messages":[]}' \
  https://api.example.test/v1/chat/completions`
	a := createAgent(t, c, map[string]any{"name": "meterer", "command": []string{"/bin/sh", "-c", script},
		"scopes":  []string{"llm:use"},
		"network": map[string]any{"mode": "allowlist", "allow": []map[string]any{{"host": "api.example.test"}}}})
	const value = "sk-direct-REAL-provider-key-0123456789"
	sec, err := c.PutSecret(ctx, "direct-provider", value)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.CreateGrant(ctx, sec.ID, warden.Grant{Principal: a.PrincipalID, Hosts: []string{"api.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(map[string]string{"key": g.Placeholder})
	r, err := c.RunAgent(ctx, "meterer", input)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, c, r.ID, "ended", warden.AgentRun.Ended)
	out, all := runLog(t, c, r.ID)
	if r.State != warden.AgentRunSucceeded || !strings.Contains(out, `"prompt_tokens":12`) || !strings.Contains(out, `"prompt_tokens":30`) {
		t.Fatalf("run %s: %s (%s)\n%s\nwardend:\n%s", r.ID, r.State, r.Reason, all, d.log)
	}
	if got := up.last("api.example.test"); got != "Bearer "+value {
		t.Fatalf("the provider received %q, want the brokered key", got)
	}
	// The gateway call settles once its answer was sent: wait for both.
	var row warden.UsageRow
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rep, err := c.LLMUsage(ctx, warden.UsageQuery{GroupBy: "sandbox", Sandbox: r.SandboxID, Since: "1h"})
		if err == nil && len(rep.Rows) == 1 {
			if row = rep.Rows[0]; row.Calls == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's LLM usage: %+v %v", rep, err)
		}
	}
	// 12+30 in, 5+7 out at $2 and $8 per million: 84 + 96 µ$.
	if row.Key != r.SandboxID || row.TokensIn != 42 || row.TokensOut != 12 || row.CostMicros != 180 {
		t.Fatalf("the sandbox's usage %+v, want 2 calls, 42 in, 12 out, 180 µ$", row)
	}
	rep, err := c.LLMUsage(ctx, warden.UsageQuery{GroupBy: "model", Sandbox: r.SandboxID, Since: "1h"})
	if err != nil || len(rep.Rows) != 2 || rep.Rows[0].Key != "api.example.test/gpt-meter-direct" || rep.Rows[0].TokensIn != 30 ||
		rep.Rows[1].Key != "openai/gpt-meter" || rep.Rows[1].TokensIn != 12 {
		t.Fatalf("the sandbox's usage by model: %+v %v", rep.Rows, err)
	}
	// The direct call is audited as llm.call via egress, for the agent.
	page, err := c.ListAudit(ctx, warden.AuditQuery{Principal: a.PrincipalID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	vias := map[string]int{}
	for _, ev := range page.Events {
		if ev.Action == "llm.call" {
			vias[fmt.Sprint(ev.Detail["via"])]++
			if ev.Detail["via"] == "egress" && (ev.Detail["sandbox"] != r.SandboxID || ev.Detail["agent"] != "meterer") {
				t.Errorf("egress llm.call %+v", ev)
			}
		}
	}
	if vias["egress"] != 1 || vias["<nil>"] != 1 {
		t.Errorf("llm.call events by via: %v, want one egress and one gateway call", vias)
	}
}
