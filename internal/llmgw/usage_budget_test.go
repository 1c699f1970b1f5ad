package llmgw

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

const userKey = "wdn_user_key"

// usageAuth knows the agent key of fakeAuth and a person's key.
type usageAuth struct{}

func (usageAuth) Authenticate(ctx context.Context, h string) (auth.Identity, error) {
	if h == "Bearer "+userKey {
		return auth.Identity{Principal: store.Principal{ID: "prn_user", Kind: store.PrincipalUser}, Scopes: []auth.Scope{auth.ScopeLLMUse}}, nil
	}
	return fakeAuth{}.Authenticate(ctx, h)
}

// usageGW is a gateway over st in front of upstream, at a fixed day.
func usageGW(t testing.TB, st UsageStore, upstream string, budgets []config.LLMBudget) (*Gateway, *httptest.Server) {
	t.Helper()
	dial, err := safedial.New(safedial.Options{Allow: []string{"127.0.0.1"}, AllowHTTP: true, MaxResponseBytes: -1, MaxRedirects: -1})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Config{
		LLM: config.LLMConfig{
			Providers: []config.LLMProvider{{Name: "openai", Kind: "openai", BaseURL: upstream + "/v1", KeySecret: "sec_oai"}},
			Prices:    []config.LLMPrice{{Model: "gpt-4o-mini", Input: 2.5, Output: 10}},
			Budgets:   budgets,
		},
		Auth: usageAuth{}, Audit: &auditCapture{}, Secrets: fakeSecrets{"sec_oai": providerKey},
		Client: dial.Client(), Usage: st,
		Now: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return gw, srv
}

func callChat(t *testing.T, url, key string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/llm/openai/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func openStore(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBudgetSurvivesRestart: the usage and the budgets set at run time are
// in the store, so a new gateway over the same database (wardend
// restarted) still refuses a principal whose budget is spent.
func TestBudgetSurvivesRestart(t *testing.T) {
	var up upstreamLog
	oai := fakeOpenAI(t, &up)
	defer oai.Close()
	dbPath := filepath.Join(t.TempDir(), "warden.db")
	st := openStore(t, dbPath)
	gw, srv := usageGW(t, st, oai.URL, nil)
	// The budget is set at run time, not in the config.
	if err := gw.SetBudgets(context.Background(), []config.LLMBudget{{Name: "daily", Principal: "*", Period: "day", Tokens: 30}}, "prn_admin"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // 17 tokens each
		if code, body := callChat(t, srv.URL, agentKey, nil, `{"model":"gpt-4o-mini","messages":[]}`); code != 200 {
			t.Fatalf("call %d: %d %s", i, code, body)
		}
	}
	srv.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openStore(t, dbPath)
	defer st.Close()
	gw2, srv2 := usageGW(t, st, oai.URL, nil)
	if b, src := gw2.Budgets(); len(b) != 1 || b[0].Name != "daily" || src != "api" {
		t.Fatalf("budgets after restart: %+v from %s", b, src)
	}
	code, body := callChat(t, srv2.URL, agentKey, nil, `{"model":"gpt-4o-mini","messages":[]}`)
	if code != 429 || !strings.Contains(body, `\"daily\" is spent: 34 of 30 tokens`) {
		t.Fatalf("after restart: %d %s", code, body)
	}
	u := gw2.Usage()
	if len(u) != 1 || u[0].Calls != 2 || u[0].TokensIn != 24 || u[0].TokensOut != 10 || u[0].CostMicros != 2*(12*2.5+5*10) || u[0].Agent != "prn_agent" {
		t.Fatalf("usage after restart: %+v", u)
	}
	// Deleting the run-time budgets goes back to the config's (none).
	if err := gw2.SetBudgets(context.Background(), nil, "prn_admin"); err != nil {
		t.Fatal(err)
	}
	if code, body := callChat(t, srv2.URL, agentKey, nil, `{"model":"gpt-4o-mini","messages":[]}`); code != 200 {
		t.Fatalf("budgets reset: %d %s", code, body)
	}
}

// TestParallelCallsAtCap: calls in flight hold a reservation of their
// estimate (max_tokens plus the prompt's size), so a burst of parallel
// calls made while none has finished cannot all pass the budget check.
func TestParallelCallsAtCap(t *testing.T) {
	const n = 20
	var inflight atomic.Int64
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		inflight.Add(1)
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c0","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	}))
	defer slow.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	_, srv := usageGW(t, nil, slow.URL, []config.LLMBudget{{Name: "cap", Principal: "prn_agent", Period: "day", Tokens: 100}})

	body := `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}` // ~20 + 21 tokens reserved
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _ := callChat(t, srv.URL, agentKey, nil, body); code == 429 {
				refused.Add(1)
			}
		}()
	}
	// Every call is either refused or waiting upstream: only then let
	// the upstream answer.
	deadline := time.Now().Add(20 * time.Second)
	for inflight.Load()+refused.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("calls stuck: %d upstream, %d refused", inflight.Load(), refused.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	passed := inflight.Load()
	close(release)
	wg.Wait()
	// 41 tokens reserved per call: the calls that passed while the others
	// were in flight are those whose reservations stayed under 100.
	if passed > 3 || passed < 1 {
		t.Fatalf("%d of %d parallel calls passed a 100-token budget (30 tokens each): want at most 3", passed, n)
	}
	if used := passed * 30; used > 100+30 {
		t.Fatalf("used %d tokens of a 100-token budget", used)
	}
}

// TestAgentAndGroupBudgets: an agent label (X-Warden-Agent on a person's
// key, the principal itself for agent principals) and a group of
// principals each have their own budgets.
func TestAgentAndGroupBudgets(t *testing.T) {
	var up upstreamLog
	oai := fakeOpenAI(t, &up)
	defer oai.Close()
	gw, srv := usageGW(t, nil, oai.URL, []config.LLMBudget{
		{Name: "bots", Agent: "*", Period: "day", Tokens: 20},
		{Name: "team", Group: []string{"prn_user", "prn_agent"}, Period: "month", USD: 0.0002}, // 200 micro-dollars
	})
	req := `{"model":"gpt-4o-mini","messages":[]}` // 17 tokens, 80 micro-dollars
	if code, body := callChat(t, srv.URL, userKey, map[string]string{"X-Warden-Agent": "claude-code"}, req); code != 200 {
		t.Fatalf("first: %d %s", code, body)
	}
	// Same agent again: 17 < 20, passes; then spent.
	if code, body := callChat(t, srv.URL, userKey, map[string]string{"X-Warden-Agent": "claude-code"}, req); code != 200 {
		t.Fatalf("second: %d %s", code, body)
	}
	if code, body := callChat(t, srv.URL, userKey, map[string]string{"X-Warden-Agent": "claude-code"}, req); code != 429 || !strings.Contains(body, `\"bots\" is spent`) {
		t.Fatalf("agent budget: %d %s", code, body)
	}
	// Another agent of the same person has its own agent budget but
	// shares the group's: 160 of 200 micro-dollars used, passes, then
	// the group is spent for everyone in it.
	if code, body := callChat(t, srv.URL, agentKey, nil, req); code != 200 {
		t.Fatalf("agent principal: %d %s", code, body)
	}
	if code, body := callChat(t, srv.URL, userKey, nil, req); code != 429 || !strings.Contains(body, `\"team\" is spent`) {
		t.Fatalf("group budget: %d %s", code, body)
	}
	if code, _ := callChat(t, srv.URL, userKey, map[string]string{"X-Warden-Agent": "bad agent!"}, req); code != 400 {
		t.Fatalf("bad agent label: %d", code)
	}
	var agents []string
	for _, u := range gw.Usage() {
		agents = append(agents, u.PrincipalID+"/"+u.Agent)
	}
	if strings.Join(agents, ",") != "prn_agent/prn_agent,prn_user/claude-code" {
		t.Fatalf("usage rows %v", agents)
	}
	// The Prometheus series carry the same labels.
	l := []string{"prn_user", "claude-code", "openai", "gpt-4o-mini"}
	if n := testutil.ToFloat64(gw.metrics.tokens.WithLabelValues(append(l, "input")...)); n != 24 {
		t.Fatalf("input tokens metric %v, want 24", n)
	}
	if n := testutil.ToFloat64(gw.metrics.calls.WithLabelValues(append(l, "denied")...)); n != 1 {
		t.Fatalf("denied calls metric %v, want 1", n)
	}
	if n := testutil.ToFloat64(gw.metrics.cost.WithLabelValues(l...)); n < 0.000159 || n > 0.000161 {
		t.Fatalf("cost metric %v, want 0.00016", n)
	}
	if err := gw.SetBudgets(context.Background(), []config.LLMBudget{{Name: "x", Principal: "a", Agent: "b", Period: "day", Tokens: 1}}, "admin"); err == nil {
		t.Fatal("a budget with two scopes was accepted")
	}
}
