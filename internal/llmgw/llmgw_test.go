package llmgw

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
)

const (
	providerKey = "sk-provider-SECRET-0123456789"
	agentKey    = "wdn_agent_key"
	noScopeKey  = "wdn_no_scope"
)

type fakeAuth struct{}

func (fakeAuth) Authenticate(_ context.Context, h string) (auth.Identity, error) {
	switch h {
	case "Bearer " + agentKey:
		return auth.Identity{Principal: store.Principal{ID: "prn_agent", Kind: store.PrincipalAgent}, Scopes: []auth.Scope{auth.ScopeLLMUse}}, nil
	case "Bearer " + noScopeKey:
		return auth.Identity{Principal: store.Principal{ID: "prn_other", Kind: store.PrincipalAgent}, Scopes: []auth.Scope{auth.ScopeSandboxesRead}}, nil
	}
	return auth.Identity{}, errkind.New(errkind.Unauthenticated, "bad key")
}

type fakeSecrets map[string]string

func (f fakeSecrets) Current(id string) ([]byte, int, error) {
	v, ok := f[id]
	if !ok {
		return nil, 0, errkind.New(errkind.NotFound, "no secret")
	}
	return []byte(v), 1, nil
}

type auditCapture struct {
	mu  sync.Mutex
	evs []govern.AuditEvent
}

func (a *auditCapture) Write(_ context.Context, ev govern.AuditEvent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, ev)
	return nil
}

func (a *auditCapture) all() []govern.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]govern.AuditEvent(nil), a.evs...)
}

// upstreamLog is what a fake provider saw.
type upstreamLog struct {
	mu    sync.Mutex
	calls int
	auth  []string // Authorization and x-api-key headers
	body  map[string]any
}

func (u *upstreamLog) record(r *http.Request) map[string]any {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	u.auth = append(u.auth, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	u.body = body
	return body
}

func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, e := range events {
		io.WriteString(w, e+"\n\n")
		fl.Flush()
	}
}

// fakeOpenAI speaks OpenAI's wire format: chat (streams with usage only
// when stream_options.include_usage), embeddings.
func fakeOpenAI(t *testing.T, log *upstreamLog) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := log.record(r)
		if r.Header.Get("Authorization") != "Bearer "+providerKey {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+r.Header.Get("Authorization")+`","type":"invalid_request_error"}}`)
			return
		}
		if body["model"] == "echo-key" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"bad model for key `+providerKey+`","type":"invalid_request_error"}}`)
			return
		}
		switch r.URL.Path {
		case "/v1/embeddings":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`)
		case "/v1/chat/completions":
			if body["stream"] == true {
				so, _ := body["stream_options"].(map[string]any)
				ev := []string{
					`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini-2024","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}],"usage":null}`,
					`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini-2024","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":null}`,
				}
				if so["include_usage"] == true {
					ev = append(ev, `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-mini-2024","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`)
				}
				sse(w, append(ev, "data: [DONE]")...)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c0","object":"chat.completion","model":"gpt-4o-mini-2024","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
		default:
			http.NotFound(w, r)
		}
	}))
}

// fakeAnthropic speaks Anthropic's Messages API, streams included.
func fakeAnthropic(t *testing.T, log *upstreamLog) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := log.record(r)
		if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != providerKey || r.Header.Get("Anthropic-Version") == "" {
			w.WriteHeader(401)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		if body["stream"] == true {
			sse(w,
				"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\",\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":4,\"output_tokens\":1}}}",
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}",
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}",
				"event: message_stop\ndata: {\"type\":\"message_stop\"}")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_0","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":20,"cache_read_input_tokens":4,"output_tokens":9}}`)
	}))
}

type env struct {
	gw          *Gateway
	srv         *httptest.Server
	oai, ant    upstreamLog
	audit       auditCapture
	now         time.Time
	nowMu       sync.Mutex
	openaiURL   string
	anthropicIP string
}

func newEnv(t *testing.T, eng *govern.Engine, budgets []config.LLMBudget) *env {
	t.Helper()
	e := &env{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	oai, ant := fakeOpenAI(t, &e.oai), fakeAnthropic(t, &e.ant)
	t.Cleanup(oai.Close)
	t.Cleanup(ant.Close)
	// The real safe dialer, with the admin's exception for the local
	// servers (loopback is refused without it).
	dial, err := safedial.New(safedial.Options{Allow: []string{"127.0.0.1"}, AllowHTTP: true, MaxResponseBytes: -1, MaxRedirects: -1})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Config{
		LLM: config.LLMConfig{
			Providers: []config.LLMProvider{
				{Name: "openai", Kind: "openai", BaseURL: oai.URL + "/v1", KeySecret: "sec_oai", Models: map[string]string{"fast": "gpt-4o-mini"}},
				{Name: "anthropic", Kind: "anthropic", BaseURL: ant.URL, KeySecret: "sec_ant"},
			},
			Prices: []config.LLMPrice{
				{Model: "gpt-4o-mini", Input: 2.5, Output: 10},
				{Model: "claude-*", Input: 3, Output: 15},
			},
			Budgets: budgets,
		},
		Auth: fakeAuth{}, Govern: eng, Audit: &e.audit,
		Secrets: fakeSecrets{"sec_oai": providerKey, "sec_ant": providerKey + "\n"},
		Client:  dial.Client(),
		Now: func() time.Time {
			e.nowMu.Lock()
			defer e.nowMu.Unlock()
			return e.now
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	e.srv = httptest.NewServer(gw)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) post(t *testing.T, p string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+p, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var bearer = map[string]string{"Authorization": "Bearer " + agentKey}

func (e *env) usage(t *testing.T, model string) Usage {
	t.Helper()
	var u Usage
	for _, x := range e.gw.Usage() {
		if x.Model == model {
			u.TokensIn += x.TokensIn
			u.TokensOut += x.TokensOut
			u.CostMicros += x.CostMicros
			u.Calls += x.Calls
		}
	}
	return u
}

func lastAudit(t *testing.T, e *env) govern.AuditEvent {
	t.Helper()
	evs := e.audit.all()
	if len(evs) == 0 {
		t.Fatal("no audit event")
	}
	return evs[len(evs)-1]
}

func checkNoProviderKey(t *testing.T, e *env, resp *http.Response, body string) {
	t.Helper()
	if strings.Contains(body, providerKey) {
		t.Fatalf("the provider key reached the client: %s", body)
	}
	for k, v := range resp.Header {
		if strings.Contains(strings.Join(v, " "), providerKey) {
			t.Fatalf("the provider key is in response header %s", k)
		}
	}
	b, _ := json.Marshal(e.audit.all())
	if strings.Contains(string(b), providerKey) {
		t.Fatal("the provider key is in the audit log")
	}
}

func checkUpstreamAuth(t *testing.T, u *upstreamLog) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, h := range u.auth {
		if strings.Contains(h, agentKey) {
			t.Fatalf("the client's Warden key reached the upstream: %q", h)
		}
	}
}

func TestOpenAIChatNonStream(t *testing.T) {
	e := newEnv(t, nil, nil)
	resp, body := e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"fast","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":50}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"content":"Hello"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if e.oai.body["model"] != "gpt-4o-mini" {
		t.Fatalf("the alias was not resolved upstream: %v", e.oai.body["model"])
	}
	if e.oai.auth[0] != "Bearer "+providerKey {
		t.Fatalf("upstream Authorization %q, want the provider key", e.oai.auth[0])
	}
	checkUpstreamAuth(t, &e.oai)
	checkNoProviderKey(t, e, resp, body)
	u := e.usage(t, "gpt-4o-mini")
	// 12 × $2.5/M + 5 × $10/M = 30 + 50 micro-dollars.
	if u.TokensIn != 12 || u.TokensOut != 5 || u.CostMicros != 80 || u.Calls != 1 {
		t.Fatalf("usage %+v, want 12 in, 5 out, 80 µ$", u)
	}
	ev := lastAudit(t, e)
	if ev.Name != "llm.call" || ev.Outcome != govern.AuditSuccess || ev.Detail["tokens_in"] != int64(12) || ev.Detail["tokens_out"] != int64(5) ||
		ev.Detail["cost_micros"] != int64(80) || ev.Detail["model"] != "fast" || ev.Principal != "prn_agent" {
		t.Fatalf("audit event %+v", ev)
	}
	if _, ok := ev.Detail["duration_ms"]; !ok {
		t.Fatal("no duration in the audit event")
	}
	a := ev.Governed[0].Action.LLM
	if a.Provider != "openai" || a.Upstream != "gpt-4o-mini" || a.MaxTokens != 50 || len(a.Tools) != 1 || a.Tools[0] != "get_weather" || a.Stream {
		t.Fatalf("llm.call attributes %+v", a)
	}

	// Embeddings are metered from their usage too.
	resp, body = e.post(t, "/llm/openai/v1/embeddings", bearer, `{"model":"gpt-4o-mini","input":"hi"}`)
	if resp.StatusCode != 200 || e.usage(t, "gpt-4o-mini").TokensIn != 20 {
		t.Fatalf("embeddings: %d %s, usage %+v", resp.StatusCode, body, e.usage(t, "gpt-4o-mini"))
	}
}

func TestProviderKeyNeverShown(t *testing.T) {
	e := newEnv(t, nil, nil)
	resp, body := e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"echo-key","messages":[]}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "[redacted]") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	checkNoProviderKey(t, e, resp, body)
	if ev := lastAudit(t, e); ev.Outcome != govern.AuditError {
		t.Fatalf("an upstream error audited as %s", ev.Outcome)
	}
}

func readStream(t *testing.T, body string) (datas []string) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			datas = append(datas, d)
		}
	}
	return datas
}

func TestOpenAIChatStream(t *testing.T) {
	e := newEnv(t, nil, nil)
	// The client did not ask for usage: the gateway asks, reads it, and
	// keeps the usage chunk from the client.
	resp, body := e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"gpt-4o-mini","stream":true,"messages":[]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	so, _ := e.oai.body["stream_options"].(map[string]any)
	if so["include_usage"] != true {
		t.Fatalf("upstream stream_options %v, want include_usage", e.oai.body["stream_options"])
	}
	d := readStream(t, body)
	if len(d) != 3 || d[2] != "[DONE]" || strings.Contains(body, `"usage":{`) {
		t.Fatalf("stream to the client:\n%s", body)
	}
	if u := e.usage(t, "gpt-4o-mini"); u.TokensIn != 12 || u.TokensOut != 7 || u.CostMicros != 100 {
		t.Fatalf("usage %+v, want 12 in, 7 out, 100 µ$", u)
	}
	if ev := lastAudit(t, e); ev.Detail["tokens_out"] != int64(7) || ev.Detail["stream"] != true {
		t.Fatalf("audit %+v", ev.Detail)
	}
	// Asked for: passed on.
	_, body = e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if d := readStream(t, body); len(d) != 4 || !strings.Contains(d[2], `"prompt_tokens":12`) {
		t.Fatalf("stream with usage asked for:\n%s", body)
	}
	checkUpstreamAuth(t, &e.oai)
}

func TestAnthropicMessages(t *testing.T) {
	e := newEnv(t, nil, nil)
	xkey := map[string]string{"X-Api-Key": agentKey, "Anthropic-Version": "2023-06-01"}
	resp, body := e.post(t, "/llm/anthropic/v1/messages", xkey, `{"model":"claude-x","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"text":"Hi"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	// 24 in (20 + 4 cache reads) × $3/M + 9 out × $15/M = 72 + 135.
	if u := e.usage(t, "claude-x"); u.TokensIn != 24 || u.TokensOut != 9 || u.CostMicros != 207 {
		t.Fatalf("usage %+v", u)
	}
	resp, body = e.post(t, "/llm/anthropic/v1/messages", xkey, `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, "event: message_stop") || !strings.Contains(body, `"text":"Hi"`) {
		t.Fatalf("stream: %d\n%s", resp.StatusCode, body)
	}
	if u := e.usage(t, "claude-x"); u.TokensIn != 48 || u.TokensOut != 18 || u.Calls != 2 {
		t.Fatalf("usage after the stream %+v, want 24+24 in and 9+9 out (cumulative message_delta)", u)
	}
	checkUpstreamAuth(t, &e.ant)
	checkNoProviderKey(t, e, resp, body)
}

func TestAuthAndScope(t *testing.T) {
	e := newEnv(t, nil, nil)
	resp, body := e.post(t, "/llm/openai/v1/chat/completions", nil, `{"model":"gpt-4o-mini"}`)
	if resp.StatusCode != 401 || !strings.Contains(body, `"error":{`) {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/llm/anthropic/v1/messages", map[string]string{"X-Api-Key": noScopeKey}, `{"model":"claude-x"}`)
	if resp.StatusCode != 403 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "llm:use") {
		t.Fatalf("no scope: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.post(t, "/llm/nope/v1/chat/completions", bearer, `{"model":"x"}`)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown provider: %d", resp.StatusCode)
	}
	resp, _ = e.post(t, "/llm/anthropic/v1/chat/completions", bearer, `{"model":"x"}`)
	if resp.StatusCode != 404 {
		t.Fatalf("an OpenAI path on an Anthropic provider: %d", resp.StatusCode)
	}
	if e.oai.calls+e.ant.calls != 0 {
		t.Fatal("refused calls reached the upstream")
	}
}

func TestBudgetExceeded(t *testing.T) {
	e := newEnv(t, nil, []config.LLMBudget{{Name: "agent-daily", Principal: "prn_agent", Period: "day", Tokens: 30}})
	call := func() (*http.Response, string) {
		return e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"gpt-4o-mini","messages":[]}`)
	}
	for i := range 2 { // 17 tokens each: 0 and 17 used before, under 30
		if resp, body := call(); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := call()
	if resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("past the budget: %d %s", resp.StatusCode, body)
	}
	var oe struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal([]byte(body), &oe); err != nil || oe.Error.Code != "budget_exceeded" || !strings.Contains(oe.Error.Message, `"agent-daily"`) ||
		!strings.Contains(oe.Error.Message, "34 of 30 tokens") {
		t.Fatalf("budget error %s", body)
	}
	if e.oai.calls != 2 {
		t.Fatalf("%d upstream calls, want 2", e.oai.calls)
	}
	if ev := lastAudit(t, e); ev.Outcome != govern.AuditDenied || ev.Detail["budget"] != "agent-daily" {
		t.Fatalf("audit %+v", ev)
	}
	// Anthropic's error shape for the same budget.
	resp, body = e.post(t, "/llm/anthropic/v1/messages", map[string]string{"X-Api-Key": agentKey}, `{"model":"claude-x","max_tokens":5}`)
	if resp.StatusCode != 429 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "agent-daily") {
		t.Fatalf("anthropic past the budget: %d %s", resp.StatusCode, body)
	}
	// The next day the budget is fresh.
	e.nowMu.Lock()
	e.now = e.now.Add(24 * time.Hour)
	e.nowMu.Unlock()
	if resp, body := call(); resp.StatusCode != 200 {
		t.Fatalf("the next day: %d %s", resp.StatusCode, body)
	}
}

func TestRuleDeniesModel(t *testing.T) {
	eng := govern.New(govern.Config{})
	t.Cleanup(eng.Close)
	_, err := eng.CreatePolicy(context.Background(), govern.Policy{ID: "llm-models", Scope: govern.Scope{Kind: govern.ScopeInstallation},
		Rules: []govern.Rule{{ID: "no-big-model", Kinds: []govern.Kind{govern.KindLLMCall}, When: `llm.upstream.startsWith("claude-")`,
			Outcome: govern.Deny, Message: "claude models are not for agents"}}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, eng, nil)
	resp, body := e.post(t, "/llm/anthropic/v1/messages", map[string]string{"X-Api-Key": agentKey}, `{"model":"claude-x","max_tokens":5}`)
	if resp.StatusCode != 403 || !strings.Contains(body, "claude models are not for agents") || !strings.Contains(body, "permission_error") {
		t.Fatalf("denied model: %d %s", resp.StatusCode, body)
	}
	if e.ant.calls != 0 {
		t.Fatal("a denied call reached the upstream")
	}
	evs := e.audit.all()
	if len(evs) != 1 || evs[0].Outcome != govern.AuditDenied || evs[0].Governed[0].Decision.RuleID != "no-big-model" ||
		evs[0].Governed[0].Decision.PolicyID != "llm-models" {
		t.Fatalf("audit events %+v", evs)
	}
	// Other models pass.
	if resp, body := e.post(t, "/llm/openai/v1/chat/completions", bearer, `{"model":"gpt-4o-mini"}`); resp.StatusCode != 200 {
		t.Fatalf("allowed model: %d %s", resp.StatusCode, body)
	}
}

func TestSafeDialerRefusesUnlisted(t *testing.T) {
	log := &upstreamLog{}
	up := fakeOpenAI(t, log)
	defer up.Close()
	dial, err := safedial.New(safedial.Options{AllowHTTP: true}) // no exception for loopback
	if err != nil {
		t.Fatal(err)
	}
	audit := &auditCapture{}
	gw, err := New(Config{LLM: config.LLMConfig{Providers: []config.LLMProvider{{Name: "local", Kind: "openai", BaseURL: up.URL + "/v1", KeySecret: "k"}}},
		Auth: fakeAuth{}, Audit: audit, Secrets: fakeSecrets{"k": providerKey}, Client: dial.Client()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	u, _ := url.JoinPath(srv.URL, "/llm/local/v1/chat/completions")
	req, _ := http.NewRequest("POST", u, strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer "+agentKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || log.calls != 0 {
		t.Fatalf("a loopback provider without an allow entry: status %d, %d upstream calls", resp.StatusCode, log.calls)
	}
}
