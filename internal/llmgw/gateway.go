// Package llmgw is the LLM gateway (docs/llm.md): OpenAI- and
// Anthropic-compatible endpoints at /llm/{provider}/v1/... in front of the
// configured providers. Agents call it with a Warden API key (scope
// llm:use); the provider's key, read from the secrets store, is set by the
// gateway and never shown. Every call is an llm.call action on the
// governed path, is metered from the provider's usage fields, priced from
// the configured price table, held to the configured budgets, and audited
// once with its tokens, cost and decision.
package llmgw

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/llmusage"
	"github.com/warden-sandbox/warden/internal/store"
)

// PathPrefix is where the gateway is served: /llm/{provider}/v1/...
const PathPrefix = "/llm/"

// ScopeUse is the scope a key needs to call models.
const ScopeUse = auth.ScopeLLMUse

const (
	maxRequestBytes  = 32 << 20
	maxResponseBytes = 64 << 20
	maxSSELine       = 16 << 20
)

// Authenticator checks a request's Authorization header
// (*auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Identity, error)
}

// Secrets reads a secret's current value (*secrets.Vault).
type Secrets interface {
	Current(id string) ([]byte, int, error)
}

// AuditLog writes a call's audit event (*govern.AuditLog).
type AuditLog interface {
	Write(ctx context.Context, ev govern.AuditEvent) error
}

// Config configures a Gateway.
type Config struct {
	LLM     config.LLMConfig
	Auth    Authenticator
	Govern  *govern.Engine // nil: every call is allowed
	Audit   AuditLog
	Secrets Secrets
	// Client makes the upstream calls: the safe dialer's client, which
	// refuses private addresses unless an admin allowed them.
	Client *http.Client
	Log    *slog.Logger
	Now    func() time.Time
	// Usage persists usage and the price table and budgets edited at run
	// time (*sqlite.Store); nil keeps them in memory.
	Usage UsageStore
	// Timeline takes the prompts and responses for the Agent Monitor
	// (content.go); nil records none.
	Timeline Timeline
	// AgentBudgets returns more budgets for calls with an agent label:
	// those a hosted agent's spec sets (internal/agents, llm_budget).
	// Nil: none.
	AgentBudgets func(ctx context.Context, agent string) ([]config.LLMBudget, error)
	// OnUsage is told each settled call's usage with the caller's
	// identity (a hosted-agent run's key counts it for the run). Nil: none.
	OnUsage func(ctx context.Context, ident auth.Identity, u store.LLMUsage)
}

// Gateway serves the LLM endpoints. Safe for concurrent use.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	byNm      map[string]*config.LLMProvider
	meter     *meter
	metrics   *metrics
	egress    map[string]egressProvider // the hosts metered through the broker (egress.go)
	sbMetrics *sandboxMetrics           // the series by sandbox (metrics_sandbox.go)

	setMu sync.RWMutex
	set   settings          // the price table and budgets in force
	setBy map[string]string // setting name: "api" when set at run time
}

// New checks cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Auth == nil || cfg.Audit == nil || cfg.Client == nil {
		return nil, errors.New("llm gateway: no authenticator, audit log or HTTP client")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Usage == nil {
		cfg.Usage = newMemUsage()
	}
	if cfg.LLM.ReserveTokens <= 0 {
		cfg.LLM.ReserveTokens = DefaultReserveTokens
	}
	g := &Gateway{cfg: cfg, log: cfg.Log, byNm: map[string]*config.LLMProvider{}, meter: newMeter(cfg.Usage), metrics: newMetrics(),
		set: settings{prices: cfg.LLM.Prices, budgets: cfg.LLM.Budgets}, setBy: map[string]string{}}
	for i := range cfg.LLM.Providers {
		p := &cfg.LLM.Providers[i]
		if p.Name == "" || strings.ContainsAny(p.Name, "/?#") {
			return nil, fmt.Errorf("llm gateway: provider %d: bad name %q", i, p.Name)
		}
		if p.Kind != "openai" && p.Kind != "anthropic" {
			return nil, fmt.Errorf("llm gateway: provider %s: kind %q is not openai or anthropic", p.Name, p.Kind)
		}
		if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("llm gateway: provider %s: base_url %q is not an http(s) URL", p.Name, p.BaseURL)
		}
		if g.byNm[p.Name] != nil {
			return nil, fmt.Errorf("llm gateway: provider %s configured twice", p.Name)
		}
		g.byNm[p.Name] = p
	}
	g.egress, g.sbMetrics = egressHosts(cfg.LLM), newSandboxMetrics()
	if err := CheckBudgets(cfg.LLM.Budgets); err != nil {
		return nil, fmt.Errorf("llm gateway: %w", err)
	}
	if err := CheckPrices(cfg.LLM.Prices); err != nil {
		return nil, fmt.Errorf("llm gateway: %w", err)
	}
	// Values set at run time (PUT /v1/llm/prices, /v1/llm/budgets)
	// replace the config file's until they are deleted.
	ctx := context.Background()
	var prices []config.LLMPrice
	if ok, err := loadSetting(ctx, cfg.Usage, settingPrices, &prices); err != nil {
		return nil, fmt.Errorf("llm gateway: %w", err)
	} else if ok {
		if err := CheckPrices(prices); err != nil {
			return nil, fmt.Errorf("llm gateway: stored prices: %w", err)
		}
		g.set.prices, g.setBy[settingPrices] = prices, "api"
	}
	var budgets []config.LLMBudget
	if ok, err := loadSetting(ctx, cfg.Usage, settingBudgets, &budgets); err != nil {
		return nil, fmt.Errorf("llm gateway: %w", err)
	} else if ok {
		if err := CheckBudgets(budgets); err != nil {
			return nil, fmt.Errorf("llm gateway: stored budgets: %w", err)
		}
		g.set.budgets, g.setBy[settingBudgets] = budgets, "api"
	}
	return g, nil
}

// Usage returns the whole usage table (for tests and small tools; the API
// uses ListUsage).
func (g *Gateway) Usage() []Usage {
	u, _ := g.cfg.Usage.ListLLMUsage(context.Background(), store.LLMUsageFilter{})
	return u
}

// ListUsage returns the usage rows the filter matches.
func (g *Gateway) ListUsage(ctx context.Context, f store.LLMUsageFilter) ([]Usage, error) {
	return g.cfg.Usage.ListLLMUsage(ctx, f)
}

func (g *Gateway) settings() settings {
	g.setMu.RLock()
	defer g.setMu.RUnlock()
	return g.set
}

// Prices returns the price table in force and where it comes from
// ("config" or "api").
func (g *Gateway) Prices() ([]config.LLMPrice, string) {
	g.setMu.RLock()
	defer g.setMu.RUnlock()
	return slices.Clone(g.set.prices), cmp.Or(g.setBy[settingPrices], "config")
}

// Budgets returns the budgets in force and where they come from.
func (g *Gateway) Budgets() ([]config.LLMBudget, string) {
	g.setMu.RLock()
	defer g.setMu.RUnlock()
	return slices.Clone(g.set.budgets), cmp.Or(g.setBy[settingBudgets], "config")
}

// SetPrices replaces the price table at run time, persisted; nil prices
// go back to the config file's.
func (g *Gateway) SetPrices(ctx context.Context, prices []config.LLMPrice, by string) error {
	if prices != nil {
		if err := CheckPrices(prices); err != nil {
			return errkind.New(errkind.Invalid, err.Error())
		}
	}
	return g.setting(ctx, settingPrices, prices == nil, prices, by, func(s *settings) {
		s.prices = prices
		if prices == nil {
			s.prices = g.cfg.LLM.Prices
		}
	})
}

// SetBudgets replaces the budgets at run time, persisted; nil budgets go
// back to the config file's.
func (g *Gateway) SetBudgets(ctx context.Context, budgets []config.LLMBudget, by string) error {
	if budgets != nil {
		if err := CheckBudgets(budgets); err != nil {
			return errkind.New(errkind.Invalid, err.Error())
		}
	}
	return g.setting(ctx, settingBudgets, budgets == nil, budgets, by, func(s *settings) {
		s.budgets = budgets
		if budgets == nil {
			s.budgets = g.cfg.LLM.Budgets
		}
	})
}

func (g *Gateway) setting(ctx context.Context, name string, reset bool, v any, by string, apply func(*settings)) error {
	g.setMu.Lock()
	defer g.setMu.Unlock()
	if reset {
		if err := g.cfg.Usage.DeleteUsageSetting(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("reset %s: %w", name, err)
		}
		delete(g.setBy, name)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		if err := g.cfg.Usage.PutUsageSetting(ctx, store.UsageSetting{Name: name, Value: b, UpdatedAt: g.cfg.Now(), UpdatedBy: by}); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		g.setBy[name] = "api"
	}
	apply(&g.set)
	return nil
}

// endpoints maps a provider kind's paths (after /llm/{provider}) to the
// API name and the path appended to the provider's base URL.
var endpoints = map[string]map[string][2]string{
	"openai": {
		"/v1/chat/completions": {"chat", "/chat/completions"},
		"/v1/embeddings":       {"embeddings", "/embeddings"},
		"/v1/responses":        {"responses", "/responses"},
	},
	"anthropic": {"/v1/messages": {"messages", "/v1/messages"}},
}

// call is one request in flight.
type call struct {
	prov    *config.LLMProvider
	api     string
	ident   auth.Identity
	action  *govern.Action
	dec     govern.Decision
	detail  map[string]any
	start   time.Time
	model   string
	agent   string
	sandbox string // the sandbox the call came from (WithSandbox), "" for none
	price   price
	priced  bool
	usage   usage
	outcome string
	// more are the guard's decisions on the response (content.go).
	more []govern.Decided
	// prompt is the body sent upstream, for the timeline; text the
	// stream's text when collected.
	prompt []byte
	text   *streamText
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, PathPrefix)
	name, sub, _ := strings.Cut(rest, "/")
	prov := g.byNm[name]
	kind := "openai"
	if prov != nil {
		kind = prov.Kind
	}
	ep, ok := endpoints[kind]["/"+sub]
	if prov == nil || !ok {
		writeError(w, kind, http.StatusNotFound, "not_found_error", "no such LLM endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, kind, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	// OpenAI's SDKs send the key as a bearer token, Anthropic's as x-api-key.
	authz := r.Header.Get("Authorization")
	if authz == "" && r.Header.Get("X-Api-Key") != "" {
		authz = "Bearer " + r.Header.Get("X-Api-Key")
	}
	ident, err := g.cfg.Auth.Authenticate(r.Context(), authz)
	if err != nil {
		if k, _ := errkind.Of(err); k == errkind.Unauthenticated || errors.Is(err, auth.ErrUnauthenticated) {
			writeError(w, kind, http.StatusUnauthorized, "authentication_error", "a Warden API key is required (Authorization: Bearer wdn_... or x-api-key)")
			return
		}
		g.log.Error("llm gateway: authenticate", "err", err)
		writeError(w, kind, http.StatusServiceUnavailable, "api_error", "cannot check credentials now")
		return
	}
	if !ident.Has(ScopeUse) {
		writeError(w, kind, http.StatusForbidden, "permission_error", "the key lacks the "+string(ScopeUse)+" scope")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil || len(body) > maxRequestBytes {
		writeError(w, kind, http.StatusBadRequest, "invalid_request_error", "cannot read the request body (at most 32 MiB)")
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, kind, http.StatusBadRequest, "invalid_request_error", "the body is not a JSON object")
		return
	}
	var model string
	if err := json.Unmarshal(req["model"], &model); err != nil || model == "" {
		writeError(w, kind, http.StatusBadRequest, "invalid_request_error", "model is required")
		return
	}
	var stream bool
	if raw, ok := req["stream"]; ok {
		_ = json.Unmarshal(raw, &stream)
	}
	upstream := model
	if m := prov.Models[model]; m != "" {
		upstream = m
	}
	p := ident.Principal
	// The agent label: a principal of kind agent is its own agent (by
	// name); other callers (a person's key used by a local agent) may
	// name one with X-Warden-Agent.
	agent := r.Header.Get("X-Warden-Agent")
	if p.Kind == store.PrincipalAgent {
		agent = cmp.Or(p.Name, p.ID) // hosted agents' principals are named for the agent
	} else if agent != "" && !agentRE.MatchString(agent) {
		writeError(w, kind, http.StatusBadRequest, "invalid_request_error", "X-Warden-Agent must be 1 to 64 letters, digits or ._:@-")
		return
	}
	set := g.settings()
	c := &call{prov: prov, api: ep[0], ident: ident, start: g.cfg.Now(), model: upstream, agent: agent, outcome: govern.AuditSuccess,
		sandbox: SandboxOf(r.Context())}
	c.action = &govern.Action{Kind: govern.KindLLMCall, Surface: govern.SurfaceLLM, RequestID: newRequestID(),
		Principal:  govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy},
		Credential: &govern.Checked{Identity: ident},
		LLM: &govern.LLMCall{Provider: prov.Name, API: ep[0], Model: model, Upstream: upstream, Stream: stream,
			Tools: toolNames(req["tools"]), MaxTokens: maxTokens(req)},
		Payload: promptPayload(body)}
	c.detail = map[string]any{"provider": prov.Name, "api": ep[0], "model": model, "upstream_model": upstream, "stream": stream}
	if agent != "" {
		c.detail["agent"] = agent
	}
	r, span := startLLMCall(r, c) // trace.go
	defer endLLMCall(span, c)
	if c.sandbox != "" {
		c.detail["sandbox"] = c.sandbox
	}

	if len(prov.AllowModels) > 0 && !matchAny(prov.AllowModels, upstream) {
		g.refuse(w, r, c, http.StatusForbidden, "permission_error", fmt.Sprintf("model %q is not allowed on provider %s", upstream, prov.Name))
		return
	}
	c.price, c.priced = priceFor(set.prices, upstream)
	if !c.priced && g.cfg.LLM.RefuseUnpriced {
		g.refuse(w, r, c, http.StatusForbidden, "permission_error", fmt.Sprintf("model %q has no price in the price table", upstream))
		return
	}
	if eng := g.cfg.Govern; eng != nil {
		d, err := eng.Decide(r.Context(), c.action)
		c.dec = d
		if err != nil {
			g.log.Error("llm gateway: decide", "err", err)
			c.outcome = govern.AuditError
			c.detail["error"] = "cannot decide the call now"
			writeError(w, kind, http.StatusServiceUnavailable, "api_error", "cannot decide the call now")
			g.audit(r.Context(), c)
			return
		}
		if err := d.Err(); err != nil {
			msg := "denied by policy"
			if _, m := errkind.Of(err); m != "" {
				msg = m
			}
			g.refuse(w, r, c, http.StatusForbidden, "permission_error", msg)
			return
		}
		if d.Masked != nil { // a guard masked the prompt (content.go)
			var mreq map[string]json.RawMessage
			if err := json.Unmarshal(d.Masked, &mreq); err != nil {
				g.refuse(w, r, c, http.StatusForbidden, "permission_error", "the masked prompt is not a JSON object, so it is refused")
				return
			}
			body, req = d.Masked, mreq
			c.detail["prompt_masked"] = true
		}
	} else {
		c.dec = govern.Decision{Outcome: govern.Allow}
	}
	// Reserve an estimate against the budgets before the call (max_tokens
	// or the default, and a quarter of the body's bytes as input tokens)
	// so that calls in flight count; settle records the real use before
	// the reservation is released.
	estOut := c.action.LLM.MaxTokens
	if estOut <= 0 {
		estOut = g.cfg.LLM.ReserveTokens
	}
	estIn := int64(len(body) / 4)
	budgets := set.budgets
	var berr error
	if g.cfg.AgentBudgets != nil && agent != "" {
		var more []config.LLMBudget
		if more, berr = g.cfg.AgentBudgets(r.Context(), agent); len(more) > 0 {
			budgets = append(slices.Clone(budgets), more...)
		}
	}
	res, b, why, err := g.meter.reserve(r.Context(), budgets, p.ID, agent, g.cfg.Now(), spend{estIn + estOut, c.price.cost(estIn, estOut)})
	err = cmp.Or(berr, err)
	if err != nil {
		g.log.Error("llm gateway: budgets", "err", err)
		c.outcome, c.detail["error"] = govern.AuditError, "cannot check budgets now"
		writeError(w, kind, http.StatusServiceUnavailable, "api_error", "cannot check budgets now")
		g.audit(r.Context(), c)
		return
	}
	if b != "" {
		c.detail["budget"] = b
		w.Header().Set("X-Should-Retry", "false") // the SDKs would retry a 429
		g.refuse(w, r, c, http.StatusTooManyRequests, "budget_exceeded", why)
		return
	}
	defer g.meter.release(res)

	// The upstream request: the provider's model name, usage asked for
	// at the end of OpenAI chat streams.
	req["model"], _ = json.Marshal(upstream)
	stripUsage := false
	if stream && c.api == "chat" {
		var so map[string]json.RawMessage
		_ = json.Unmarshal(req["stream_options"], &so)
		if so == nil {
			so = map[string]json.RawMessage{}
		}
		if string(so["include_usage"]) != "true" {
			stripUsage = true
			so["include_usage"] = json.RawMessage("true")
			req["stream_options"], _ = json.Marshal(so)
		}
	}
	out, err := json.Marshal(req)
	if err != nil {
		writeError(w, kind, http.StatusBadRequest, "invalid_request_error", "cannot encode the request")
		return
	}
	if g.cfg.Timeline != nil {
		c.prompt = out
	}
	key, err := g.providerKey(prov)
	if err != nil {
		g.log.Error("llm gateway: provider key", "provider", prov.Name, "err", err)
		c.outcome, c.detail["error"] = govern.AuditError, "provider key unavailable"
		writeError(w, kind, http.StatusBadGateway, "api_error", "the provider's key is not available")
		g.audit(r.Context(), c)
		return
	}
	ureq, err := http.NewRequestWithContext(r.Context(), http.MethodPost, strings.TrimRight(prov.BaseURL, "/")+ep[1], bytes.NewReader(out))
	if err != nil {
		writeError(w, kind, http.StatusBadGateway, "api_error", "bad provider URL")
		return
	}
	ureq.Header.Set("Content-Type", "application/json")
	for _, h := range []string{"Accept", "Anthropic-Version", "Anthropic-Beta", "OpenAI-Beta", "Idempotency-Key"} {
		if v := r.Header.Get(h); v != "" {
			ureq.Header.Set(h, v)
		}
	}
	if kind == "anthropic" {
		ureq.Header.Set("X-Api-Key", string(key))
		if ureq.Header.Get("Anthropic-Version") == "" {
			ureq.Header.Set("Anthropic-Version", "2023-06-01")
		}
	} else {
		ureq.Header.Set("Authorization", "Bearer "+string(key))
	}
	traceUpstream(ureq) // trace.go
	resp, err := g.cfg.Client.Do(ureq)
	if err != nil {
		msg := "the provider cannot be reached"
		if r.Context().Err() != nil {
			msg = "the client went away"
		}
		g.log.Warn("llm gateway: upstream", "provider", prov.Name, "err", scrub(err.Error(), key))
		c.outcome, c.detail["error"] = govern.AuditError, msg
		writeError(w, kind, http.StatusBadGateway, "api_error", msg)
		g.audit(r.Context(), c)
		return
	}
	defer resp.Body.Close()
	c.detail["status"] = resp.StatusCode
	var respContent string // the answer, for the timeline
	if resp.StatusCode >= 400 {
		c.outcome = govern.AuditError
	}
	for _, h := range []string{"Content-Type", "Request-Id", "X-Request-Id", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(resp.StatusCode)
		if g.collectsStream() {
			c.text = &streamText{}
		}
		if err := g.relayStream(w, resp.Body, c, stripUsage); err != nil {
			c.detail["error"] = "stream ended: " + scrub(err.Error(), key)
			c.outcome = govern.AuditError
		}
		g.screenStream(r.Context(), c)
		if c.text != nil {
			respContent = c.text.String()
		}
	} else {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
		if err != nil || len(b) > maxResponseBytes {
			c.outcome, c.detail["error"] = govern.AuditError, "cannot read the provider's response"
			writeError(w, kind, http.StatusBadGateway, "api_error", "cannot read the provider's response")
			g.audit(r.Context(), c)
			return
		}
		var env struct {
			Usage *usage `json:"usage"`
		}
		if json.Unmarshal(b, &env) == nil && env.Usage != nil {
			c.usage.Merge(*env.Usage)
		}
		b = bytes.ReplaceAll(b, key, []byte("[redacted]"))
		if resp.StatusCode < 300 {
			var msg string
			if b, msg = g.screenResponse(r.Context(), c, b); msg != "" {
				c.outcome, c.detail["reason"] = govern.AuditDenied, msg
				writeError(w, kind, http.StatusForbidden, "permission_error", msg)
				g.settle(r.Context(), c) // the provider was paid
				g.record(c, "")
				return
			}
			respContent = string(b)
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
	}
	g.settle(r.Context(), c)
	g.record(c, respContent)
}

// refuse answers a call the gateway refuses and audits it.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, c *call, status int, typ, msg string) {
	c.outcome = govern.AuditDenied
	c.detail["reason"] = msg
	if c.dec.Outcome == "" {
		c.dec = govern.Decision{Outcome: govern.Deny, Stage: "llm", Message: msg}
	}
	writeError(w, c.prov.Kind, status, typ, msg)
	g.audit(r.Context(), c)
}

// settle records the call's usage and cost and audits it.
func (g *Gateway) settle(ctx context.Context, c *call) {
	in, out := c.usage.In(), c.usage.Out()
	cost := c.price.cost(in, out)
	u := store.LLMUsage{PrincipalID: c.ident.Principal.ID, Agent: c.agent, Day: g.cfg.Now().UTC().Format(time.DateOnly),
		Provider: c.prov.Name, Model: c.model, SandboxID: c.sandbox, Calls: 1, TokensIn: in, TokensOut: out, CostMicros: cost}
	if err := g.cfg.Usage.AddLLMUsage(context.WithoutCancel(ctx), u); err != nil {
		g.log.Error("llm gateway: record usage", "principal", u.PrincipalID, "err", err)
		c.detail["usage_error"] = "the usage was not recorded"
	}
	if g.cfg.OnUsage != nil {
		g.cfg.OnUsage(ctx, c.ident, u)
	}
	c.detail["tokens_in"], c.detail["tokens_out"], c.detail["cost_micros"] = in, out, cost
	g.observe(c, in, out, cost)
	g.observeSandbox(c, "gateway", in, out, cost)
	if !c.priced {
		c.detail["unpriced"] = true
	}
	g.audit(ctx, c)
}

func (g *Gateway) audit(ctx context.Context, c *call) {
	c.detail["duration_ms"] = g.cfg.Now().Sub(c.start).Milliseconds()
	g.countCall(c)
	ev := govern.AuditEvent{RequestID: c.action.RequestID, Principal: c.ident.Principal.ID, Name: string(govern.KindLLMCall),
		Target: "llm:" + c.prov.Name + "/" + c.model, Outcome: c.outcome, Detail: c.detail,
		Governed: append([]govern.Decided{{Action: c.action, Decision: c.dec}}, c.more...)}
	_ = g.cfg.Audit.Write(ctx, ev)
}

func (g *Gateway) providerKey(p *config.LLMProvider) ([]byte, error) {
	if p.KeySecret == "" {
		return nil, fmt.Errorf("provider %s has no key_secret", p.Name)
	}
	if g.cfg.Secrets == nil {
		return nil, errors.New("no secrets store")
	}
	v, _, err := g.cfg.Secrets.Current(p.KeySecret)
	if err != nil {
		return nil, fmt.Errorf("read secret %s: %w", p.KeySecret, err)
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || bytes.ContainsAny(v, "\r\n") {
		return nil, fmt.Errorf("secret %s is empty or not one line", p.KeySecret)
	}
	return v, nil
}

// relayStream passes an SSE stream through as it arrives, reading usage
// from its events. With stripUsage, the OpenAI usage chunk the gateway
// asked for (empty choices) is not passed on.
func (g *Gateway) relayStream(w http.ResponseWriter, body io.Reader, c *call, stripUsage bool) error {
	fl, _ := w.(http.Flusher)
	br := bufio.NewReaderSize(body, 64<<10)
	var event []byte // the lines of the event being read
	drop := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: read the rest of it.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(full) <= maxSSELine {
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
			if len(full) > maxSSELine {
				return errors.New("an event line is too long")
			}
		}
		if len(line) > 0 {
			trim := bytes.TrimRight(line, "\r\n")
			if data, ok := bytes.CutPrefix(trim, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				if c.usage.FromEvent(data) && stripUsage {
					drop = true
				}
				if c.text != nil {
					c.text.add(data)
				}
			}
			event = append(event, line...)
			if len(trim) == 0 { // the event's end
				if !drop {
					if _, werr := w.Write(event); werr != nil {
						return werr
					}
					// Flush before the next read would wait on the
					// upstream; events already read go out together.
					if fl != nil && br.Buffered() == 0 {
						fl.Flush()
					}
				}
				event, drop = event[:0], false
			}
		}
		if err != nil {
			if len(event) > 0 && !drop {
				_, _ = w.Write(event)
			}
			if fl != nil {
				fl.Flush()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// usage is the providers' usage fields, read by the shared parser
// (internal/llmusage; the egress broker's meter reads them with it too).
type usage = llmusage.Usage

func toolNames(raw json.RawMessage) []string {
	var tools []struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return nil
	}
	var out []string
	for _, t := range tools {
		switch {
		case t.Function.Name != "":
			out = append(out, t.Function.Name)
		case t.Name != "":
			out = append(out, t.Name)
		}
	}
	return out
}

func maxTokens(req map[string]json.RawMessage) int64 {
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		var n int64
		if json.Unmarshal(req[k], &n) == nil && n > 0 {
			return n
		}
	}
	return 0
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok || p == s {
			return true
		}
	}
	return false
}

func scrub(s string, key []byte) string {
	if len(key) == 0 {
		return s
	}
	return strings.ReplaceAll(s, string(key), "[redacted]")
}

// writeError answers in the provider's own error shape, so that its SDKs
// surface the message.
func writeError(w http.ResponseWriter, kind string, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(kind, typ, msg))
}

// errorBody is an error in the provider kind's shape (JSON, with a
// newline).
func errorBody(kind, typ, msg string) []byte {
	var body any
	if kind == "anthropic" {
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	} else {
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ, "param": nil}}
	}
	b, _ := json.Marshal(body)
	return append(b, '\n')
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "llm_" + hex.EncodeToString(b[:])
}
