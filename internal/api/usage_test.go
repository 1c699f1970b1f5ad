package api

import (
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestLLMUsageAPI: /v1/llm/prices, /v1/llm/budgets and /v1/usage over a
// real gateway and the test stack's database.
func TestLLMUsageAPI(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	us, ok := env.srv.cfg.Store.(llmgw.UsageStore)
	if !ok {
		t.Fatal("the test store keeps no usage")
	}
	gw, err := llmgw.New(llmgw.Config{Auth: env.srv.cfg.Auth, Audit: env.srv.cfg.Audit, Client: http.DefaultClient, Usage: us,
		LLM: config.LLMConfig{Prices: []config.LLMPrice{{Model: "gpt-*", Input: 1, Output: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := mcpConformance(t, nil)
	{
		// mcpConformance builds the server from env's config; rebuild
		// with the gateway.
		cfg := env.srv.cfg
		cfg.Metrics, cfg.LLM = nil, gw
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := srv.Handler()
		c.hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, pattern := c.routes.Handler(r)
			rec := &recorder{ResponseWriter: w}
			h.ServeHTTP(rec, r)
			c.verify(exchange{method: r.Method, path: r.URL.Path, pattern: pattern, status: rec.status, header: w.Header(), body: rec.body.Bytes()})
		})
	}
	admin := env.adminKey
	_, agentKey, err := newAgent(ctx, "usage-agent-"+uniq(), []string{"llm:use"})
	if err != nil {
		t.Fatal(err)
	}

	// Prices: from the config, replaced, refused when bad, reset.
	p := mcpDecode[llmPricesBody](t, c.want(200, "GET", "/v1/llm/prices", admin, nil))
	if p.Source != "config" || len(p.Prices) != 1 || p.Prices[0].Model != "gpt-*" {
		t.Fatalf("prices %+v", p)
	}
	c.want(403, "GET", "/v1/llm/prices", agentKey, nil)
	c.want(403, "PUT", "/v1/llm/prices", agentKey, map[string]any{"prices": []any{}})
	p = mcpDecode[llmPricesBody](t, c.want(200, "PUT", "/v1/llm/prices", admin, map[string]any{"prices": []map[string]any{{"model": "claude-*", "input": 3, "output": 15}}}))
	if p.Source != "api" || len(p.Prices) != 1 || p.Prices[0].Model != "claude-*" {
		t.Fatalf("set prices %+v", p)
	}
	if got, _ := gw.Prices(); got[0].Output != 15 {
		t.Fatalf("gateway prices %+v", got)
	}
	c.want(400, "PUT", "/v1/llm/prices", admin, map[string]any{"prices": []map[string]any{{"model": "x", "input": -1, "output": 1}}})
	c.want(400, "PUT", "/v1/llm/prices", admin, map[string]any{})
	p = mcpDecode[llmPricesBody](t, c.want(200, "DELETE", "/v1/llm/prices", admin, nil))
	if p.Source != "config" || p.Prices[0].Model != "gpt-*" {
		t.Fatalf("reset prices %+v", p)
	}

	// Budgets.
	b := mcpDecode[llmBudgetsBody](t, c.want(200, "PUT", "/v1/llm/budgets", admin, map[string]any{"budgets": []map[string]any{
		{"name": "daily", "agent": "*", "period": "day", "tokens": 1000},
		{"name": "team", "group": []string{"prn_a", "prn_b"}, "period": "month", "usd": 5},
	}}))
	if b.Source != "api" || len(b.Budgets) != 2 || b.Budgets[1].Group[1] != "prn_b" {
		t.Fatalf("set budgets %+v", b)
	}
	c.want(400, "PUT", "/v1/llm/budgets", admin, map[string]any{"budgets": []map[string]any{{"name": "two", "principal": "*", "agent": "*", "period": "day", "tokens": 1}}})
	c.want(400, "PUT", "/v1/llm/budgets", admin, map[string]any{"budgets": []map[string]any{{"name": "x", "principal": "*", "period": "week", "tokens": 1}}})
	if got := mcpDecode[llmBudgetsBody](t, c.want(200, "GET", "/v1/llm/budgets", admin, nil)); len(got.Budgets) != 2 {
		t.Fatalf("get budgets %+v", got)
	}
	if got := mcpDecode[llmBudgetsBody](t, c.want(200, "DELETE", "/v1/llm/budgets", admin, nil)); got.Source != "config" || len(got.Budgets) != 0 {
		t.Fatalf("reset budgets %+v", got)
	}

	// Usage, grouped, as JSON and CSV.
	pa, pb := "prn_u1_"+uniq(), "prn_u2_"+uniq()
	today := time.Now().UTC().Format(time.DateOnly)
	old := time.Now().UTC().AddDate(0, 0, -3).Format(time.DateOnly)
	for _, u := range []store.LLMUsage{
		{PrincipalID: pa, Agent: "bot-" + pa, Day: today, Provider: "openai", Model: "gpt-x", Calls: 2, TokensIn: 10, TokensOut: 20, CostMicros: 50},
		{PrincipalID: pa, Agent: "bot-" + pa, Day: old, Provider: "openai", Model: "gpt-x", Calls: 1, TokensIn: 1, TokensOut: 1, CostMicros: 3},
		{PrincipalID: pb, Agent: "", Day: today, Provider: "anthropic", Model: "claude-y", Calls: 1, TokensIn: 5, TokensOut: 5, CostMicros: 90},
	} {
		if err := us.AddLLMUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	type report struct {
		GroupBy string     `json:"group_by"`
		Rows    []usageRow `json:"rows"`
	}
	find := func(r report, key string) usageRow {
		for _, row := range r.Rows {
			if row.Key == key {
				return row
			}
		}
		t.Fatalf("no row %q in %+v", key, r.Rows)
		return usageRow{}
	}
	r := mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=principal&since=7d", admin, nil))
	if a := find(r, pa); a.Calls != 3 || a.TokensIn != 11 || a.TokensOut != 21 || a.CostMicros != 53 {
		t.Fatalf("principal row %+v", a)
	}
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=agent&since=24h&principal="+pa, admin, nil))
	if len(r.Rows) != 1 || r.Rows[0].Key != "bot-"+pa || r.Rows[0].Calls != 2 {
		t.Fatalf("agent rows since 24h %+v", r.Rows)
	}
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=model&since="+today, admin, nil))
	if m := find(r, "anthropic/claude-y"); m.CostUSD < 0.00009 {
		t.Fatalf("model row %+v", m)
	}
	code, body := c.do("GET", "/v1/usage?group_by=principal&format=csv&principal="+pb, admin, nil)
	recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if code != 200 || err != nil || len(recs) != 2 || recs[0][0] != "principal" || recs[1][0] != pb || recs[1][4] != "90" {
		t.Fatalf("csv %d %v %q", code, err, body)
	}
	c.want(400, "GET", "/v1/usage?group_by=bogus", admin, nil)
	c.want(400, "GET", "/v1/usage?since=yesterday", admin, nil)
	c.want(403, "GET", "/v1/usage", agentKey, nil)
}
