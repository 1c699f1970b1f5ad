package llmgw

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestAgentHooks: AgentBudgets adds budgets for the calls of an agent
// label (a hosted agent's llm_budget), which refuse the agent once spent
// and leave other callers alone; a failure to read them refuses the call
// (503) rather than letting it pass unmetered; OnUsage is told each
// settled call's usage with the caller's identity, and nothing of a
// refused call.
func TestAgentHooks(t *testing.T) {
	var up upstreamLog
	oai := fakeOpenAI(t, &up)
	defer oai.Close()
	dial, err := safedial.New(safedial.Options{Allow: []string{"127.0.0.1"}, AllowHTTP: true, MaxResponseBytes: -1, MaxRedirects: -1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	var usage []store.LLMUsage
	var budgetErr error
	gw, err := New(Config{
		LLM: config.LLMConfig{
			Providers: []config.LLMProvider{{Name: "openai", Kind: "openai", BaseURL: oai.URL + "/v1", KeySecret: "sec_oai"}},
			Prices:    []config.LLMPrice{{Model: "gpt-4o-mini", Input: 2.5, Output: 10}},
		},
		Auth: usageAuth{}, Audit: &auditCapture{}, Secrets: fakeSecrets{"sec_oai": providerKey}, Client: dial.Client(),
		Now: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) },
		AgentBudgets: func(_ context.Context, agent string) ([]config.LLMBudget, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, agent)
			if budgetErr != nil {
				return nil, budgetErr
			}
			if agent == "prn_agent" {
				return []config.LLMBudget{{Name: "agent:bot", Agent: agent, Period: "day", Tokens: 30}}, nil
			}
			return nil, nil
		},
		OnUsage: func(_ context.Context, id auth.Identity, u store.LLMUsage) {
			mu.Lock()
			defer mu.Unlock()
			usage = append(usage, u)
			if id.Principal.ID != u.PrincipalID {
				t.Errorf("OnUsage: identity %s, usage of %s", id.Principal.ID, u.PrincipalID)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	body := `{"model":"gpt-4o-mini","messages":[]}`
	for i := range 2 { // 17 tokens each: 0 and 17 used before, under 30
		if code, b := callChat(t, srv.URL, agentKey, nil, body); code != 200 {
			t.Fatalf("call %d: %d %s", i, code, b)
		}
	}
	code, b := callChat(t, srv.URL, agentKey, nil, body)
	if code != 429 || !strings.Contains(b, "agent:bot") || !strings.Contains(b, "budget_exceeded") {
		t.Fatalf("past the agent's budget: %d %s", code, b)
	}
	// A person's key without an agent label: no agent budget is asked.
	if code, b := callChat(t, srv.URL, userKey, nil, body); code != 200 {
		t.Fatalf("user: %d %s", code, b)
	}
	mu.Lock()
	if len(usage) != 3 || usage[0].PrincipalID != "prn_agent" || usage[0].TokensIn+usage[0].TokensOut != 17 || usage[0].Calls != 1 ||
		usage[0].CostMicros == 0 || usage[2].PrincipalID != "prn_user" {
		t.Errorf("OnUsage saw %+v, want the three calls that were made", usage)
	}
	if len(seen) != 3 {
		t.Errorf("AgentBudgets asked for %v, want the agent's three calls", seen)
	}
	budgetErr = errors.New("database is locked")
	mu.Unlock()
	if code, b := callChat(t, srv.URL, agentKey, map[string]string{}, body); code != 503 {
		t.Fatalf("budgets unreadable: %d %s, want 503", code, b)
	}
}
