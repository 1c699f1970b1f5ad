package llmgw

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/llmusage"
)

// TestSandboxAttribution: a call the warden.internal route serves (its
// context marked with WithSandbox) counts for that sandbox; a header
// naming a sandbox counts for nothing.
func TestSandboxAttribution(t *testing.T) {
	e := newEnv(t, nil, nil)
	routed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.gw.ServeHTTP(w, r.WithContext(WithSandbox(r.Context(), "sb-1")))
	}))
	t.Cleanup(routed.Close)
	post := func(base string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/llm/openai/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+agentKey)
		req.Header.Set("X-Warden-Sandbox", "sb-forged")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("call: %d", resp.StatusCode)
		}
	}
	post(routed.URL)
	if d := lastAudit(t, e).Detail; d["sandbox"] != "sb-1" {
		t.Errorf("audit detail %v, want sandbox sb-1", d)
	}
	post(e.srv.URL)
	if d := lastAudit(t, e).Detail; d["sandbox"] != nil {
		t.Errorf("audit detail of a call from outside %v names a sandbox", d)
	}
	rows := e.gw.Usage()
	if len(rows) != 2 || rows[0].SandboxID != "" || rows[1].SandboxID != "sb-1" || rows[1].TokensIn != 12 || rows[1].TokensOut != 5 ||
		rows[1].CostMicros != 80 || rows[0].Calls != 1 || rows[1].Calls != 1 {
		t.Fatalf("usage rows %+v, want one of sb-1 and one of no sandbox", rows)
	}
}

// TestEgressMeter: a call a sandbox sent straight to a known provider
// through the broker is recorded like a gateway call (sandbox, owner,
// agent, price table), audited as llm.call via egress, and held to the
// budgets before it is forwarded.
func TestEgressMeter(t *testing.T) {
	e := newEnv(t, nil, []config.LLMBudget{{Name: "daily", Principal: "*", Period: "day", Tokens: 100}})
	ctx := context.Background()
	hosts := e.gw.EgressHosts()
	if !slices.Contains(hosts, "api.openai.com") || !slices.Contains(hosts, "api.anthropic.com") || !slices.Contains(hosts, "127.0.0.1") {
		t.Fatalf("egress hosts %v, want the defaults and the providers' hosts", hosts)
	}
	if !e.gw.EgressKnown("API.Anthropic.com.") || e.gw.EgressKnown("example.com") {
		t.Fatal("EgressKnown")
	}
	if c, st, _ := e.gw.BeginEgress(ctx, EgressRequest{Host: "example.com", API: "chat"}); c != nil || st != 0 {
		t.Fatal("an unknown host was metered")
	}
	req := EgressRequest{SandboxID: "sb-2", Principal: "prn_owner", Agent: "coder", Host: "api.anthropic.com", API: "messages",
		Path: "/v1/messages", Bytes: 40}
	c, st, body := e.gw.BeginEgress(ctx, req)
	if c == nil || st != 0 {
		t.Fatalf("begin: %d %s", st, body)
	}
	c.End(ctx, EgressResult{Status: 200, Stream: true, Model: "claude-x",
		Usage: llmusage.Usage{InputTokens: 20, CacheRead: 4, OutputTokens: 9}})
	c.End(ctx, EgressResult{Status: 200, Model: "claude-x", Usage: llmusage.Usage{InputTokens: 1000}}) // a second End is a no-op
	rows := e.gw.Usage()
	if len(rows) != 1 || rows[0].SandboxID != "sb-2" || rows[0].PrincipalID != "prn_owner" || rows[0].Agent != "coder" ||
		rows[0].Provider != "api.anthropic.com" || rows[0].Model != "claude-x" || rows[0].TokensIn != 24 || rows[0].TokensOut != 9 ||
		rows[0].CostMicros != 207 || rows[0].Calls != 1 {
		t.Fatalf("usage rows %+v", rows)
	}
	ev := lastAudit(t, e)
	if ev.Name != "llm.call" || ev.Principal != "prn_owner" || ev.Target != "llm:api.anthropic.com/claude-x" || ev.Outcome != "success" ||
		ev.Detail["via"] != "egress" || ev.Detail["sandbox"] != "sb-2" || ev.Detail["tokens_in"] != int64(24) || ev.Detail["cost_micros"] != int64(207) {
		t.Fatalf("audit %+v", ev)
	}
	// No response: audited as an error, nothing recorded.
	c, _, _ = e.gw.BeginEgress(ctx, req)
	c.End(ctx, EgressResult{Err: io.ErrUnexpectedEOF})
	if ev := lastAudit(t, e); ev.Outcome != "error" || len(e.gw.Usage()) != 1 || e.gw.Usage()[0].Calls != 1 {
		t.Fatalf("a call without a response: %+v, usage %+v", ev, e.gw.Usage())
	}
	// A stream with no usage event (an OpenAI client that did not ask for
	// it) counts as a call with unknown tokens, said so in the audit.
	c, _, _ = e.gw.BeginEgress(ctx, EgressRequest{SandboxID: "sb-2", Principal: "prn_owner", Host: "api.openai.com", API: "chat"})
	c.End(ctx, EgressResult{Status: 200, Stream: true, Model: "gpt-4o-mini", Unmetered: "the stream had no usage event"})
	if ev := lastAudit(t, e); ev.Detail["unmetered"] != "the stream had no usage event" || ev.Detail["provider"] != "api.openai.com" {
		t.Fatalf("unmetered stream audit %+v", ev)
	}
	// The owner's daily budget (100 tokens) is spent by a big call: the
	// next is refused before it is forwarded, in the provider's shape.
	c, _, _ = e.gw.BeginEgress(ctx, req)
	c.End(ctx, EgressResult{Status: 200, Model: "claude-x", Usage: llmusage.Usage{InputTokens: 90}})
	c, st, body = e.gw.BeginEgress(ctx, req)
	var eb struct {
		Type  string `json:"type"`
		Error struct {
			Type, Message string
		} `json:"error"`
	}
	if c != nil || st != 429 || json.Unmarshal(body, &eb) != nil || eb.Type != "error" || eb.Error.Type != "budget_exceeded" ||
		!strings.Contains(eb.Error.Message, `"daily"`) {
		t.Fatalf("over budget: %v %d %s", c, st, body)
	}
	if ev := lastAudit(t, e); ev.Outcome != "denied" || ev.Detail["budget"] != "daily" || ev.Detail["via"] != "egress" {
		t.Fatalf("refusal audit %+v", ev)
	}
}

// TestSandboxMetrics: the series by sandbox count the calls made from a
// sandbox, via the gateway or egress, and an ended sandbox's are folded
// into sandbox="" without going down.
func TestSandboxMetrics(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	c, _, _ := e.gw.BeginEgress(ctx, EgressRequest{SandboxID: "sb-3", Principal: "p", Host: "api.anthropic.com", API: "messages"})
	c.End(ctx, EgressResult{Status: 200, Model: "claude-x", Usage: llmusage.Usage{InputTokens: 20, OutputTokens: 9}})
	c, _, _ = e.gw.BeginEgress(ctx, EgressRequest{SandboxID: "sb-4", Principal: "p", Host: "api.anthropic.com", API: "messages"})
	c.End(ctx, EgressResult{Status: 200, Model: "claude-x", Usage: llmusage.Usage{InputTokens: 1, OutputTokens: 1}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.gw.SandboxCollector())
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		return -1
	}
	in3 := map[string]string{"sandbox": "sb-3", "via": "egress", "provider": "api.anthropic.com", "model": "claude-x", "direction": "input"}
	if v := value("warden_llm_sandbox_tokens_total", in3); v != 20 {
		t.Fatalf("sb-3 input tokens %v, want 20", v)
	}
	if v := value("warden_llm_sandbox_cost_dollars_total", map[string]string{"sandbox": "sb-3"}); v != 0.000195 {
		t.Fatalf("sb-3 cost %v, want 0.000195", v)
	}
	e.gw.ForgetSandbox("sb-3")
	e.gw.ForgetSandbox("sb-4")
	if v := value("warden_llm_sandbox_tokens_total", in3); v != -1 {
		t.Fatalf("sb-3 still has a series (%v)", v)
	}
	in3["sandbox"] = ""
	if v := value("warden_llm_sandbox_tokens_total", in3); v != 21 {
		t.Fatalf("folded input tokens %v, want 21", v)
	}
	if v := value("warden_llm_sandbox_calls_total", map[string]string{"sandbox": ""}); v != 2 {
		t.Fatalf("folded calls %v, want 2", v)
	}
}
