package api

import (
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// TestLLMUsageBySandbox: LLM calls recorded with a sandbox id (through the
// warden.internal route or the egress broker) are reported beside the
// sandbox's resources by GET /v1/usage?group_by=sandbox and under the
// sandbox filter; calls from no sandbox have the key "".
func TestLLMUsageBySandbox(t *testing.T) {
	st := env.srv.cfg.Store
	us, ok := st.(store.UsageStore)
	sus, ok2 := st.(store.SandboxUsageStore)
	if !ok || !ok2 {
		t.Fatal("the test store keeps no usage")
	}
	c := mcpConformance(t, nil)
	admin := env.adminKey
	p, sb := "pr-llmsb-"+uniq(), "sb-llmsb-"+uniq()
	now := time.Now().UTC()
	day := now.Format(time.DateOnly)
	for _, u := range []store.LLMUsage{
		{PrincipalID: p, Day: day, Provider: "openai", Model: "gpt-4o-mini", SandboxID: sb, Calls: 2, TokensIn: 30, TokensOut: 12, CostMicros: 1500},
		{PrincipalID: p, Day: day, Provider: "api.anthropic.com", Model: "claude-x", SandboxID: sb, Calls: 1, TokensIn: 24, TokensOut: 9, CostMicros: 207},
		{PrincipalID: p, Day: day, Provider: "openai", Model: "gpt-4o-mini", Calls: 1, TokensIn: 5, TokensOut: 5, CostMicros: 60},
	} {
		if err := us.AddLLMUsage(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	if err := sus.RecordSandboxUsage(t.Context(), []store.SandboxUsage{{SandboxID: sb, Hour: now.Truncate(time.Hour), PrincipalID: p,
		Template: "base", CPUNanos: 2e9}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	type report struct {
		Rows []usageRow `json:"rows"`
	}
	r := mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=sandbox&principal="+p+"&since=24h", admin, nil))
	if len(r.Rows) != 2 {
		t.Fatalf("rows %+v, want the sandbox's and the no-sandbox one", r.Rows)
	}
	none, row := r.Rows[0], r.Rows[1]
	if none.Key != "" || none.Calls != 1 || none.TokensIn != 5 || none.CPUSeconds != 0 {
		t.Errorf("no-sandbox row %+v", none)
	}
	if row.Key != sb || row.Calls != 3 || row.TokensIn != 54 || row.TokensOut != 21 || row.CostMicros != 1707 ||
		row.CostUSD != 0.001707 || row.CPUSeconds != 2 || row.Sandboxes != 1 {
		t.Errorf("sandbox row %+v", row)
	}
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=model&sandbox="+sb+"&since=24h", admin, nil))
	if len(r.Rows) != 2 || r.Rows[0].Key != "api.anthropic.com/claude-x" || r.Rows[0].TokensOut != 9 ||
		r.Rows[1].Key != "openai/gpt-4o-mini" || r.Rows[1].Calls != 2 {
		t.Errorf("the sandbox's models %+v", r.Rows)
	}
}
