package llmgw

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/llmusage"
	"github.com/warden-sandbox/warden/internal/store"
)

// Egress metering (docs/llm.md): a sandbox with a brokered secret granted
// on a known provider's host (internal/broker) calls the provider
// straight, not through the gateway. The broker reads the request's model
// and the response's usage fields from bounded copies of what it relays,
// and the gateway's meter records the call like one of its own: the same
// llm_usage rows (attributed to the sandbox, its owner and its agent), the
// same price table and budgets, an llm.call audit event with via: egress.

// DefaultEgressHosts are metered whatever the config says (beside the
// hosts of the configured providers' base URLs and llm.egress_hosts).
var DefaultEgressHosts = []string{"api.openai.com", "api.anthropic.com"}

// egressProvider is what a known host is metered as.
type egressProvider struct {
	name string // the configured provider's name, else the host
	kind string // openai or anthropic: the shape of the gateway's errors
}

// egressHosts maps the known hosts to their providers.
func egressHosts(cfg config.LLMConfig) map[string]egressProvider {
	m := map[string]egressProvider{}
	add := func(host string, p egressProvider) {
		host = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(host), "."))
		if host != "" {
			m[host] = p
		}
	}
	for _, h := range DefaultEgressHosts {
		add(h, egressProvider{name: h, kind: map[bool]string{true: "anthropic", false: "openai"}[strings.Contains(h, "anthropic")]})
	}
	for _, h := range cfg.EgressHosts {
		add(h, egressProvider{name: strings.ToLower(h)})
	}
	for _, p := range cfg.Providers { // a configured provider's name wins
		if u, err := url.Parse(p.BaseURL); err == nil && u.Hostname() != "" {
			add(u.Hostname(), egressProvider{name: p.Name, kind: p.Kind})
		}
	}
	return m
}

// EgressHosts returns the hosts whose brokered model calls are metered,
// sorted.
func (g *Gateway) EgressHosts() []string {
	var out []string
	for h := range g.egress {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// EgressKnown reports whether a TLS server name is a known provider's.
func (g *Gateway) EgressKnown(host string) bool {
	_, ok := g.egress[strings.ToLower(strings.TrimSuffix(host, "."))]
	return ok
}

// EgressRequest is a model call a sandbox sends to a known provider
// through the egress broker, with whom it is attributed to.
type EgressRequest struct {
	SandboxID string
	// Principal is the sandbox's owner; Agent its agent label (the
	// owner's name when it is an agent principal), "" for none.
	Principal string
	Agent     string
	Host      string
	API       string // llmusage.API of the path
	Path      string
	// Bytes is the request body's length, -1 when unknown (chunked).
	Bytes int64
}

// EgressResult is what the broker saw of the call.
type EgressResult struct {
	Status    int // 0: no response came (nothing was paid)
	Stream    bool
	Usage     llmusage.Usage
	Model     string // "" when neither the request nor the response named one
	Unmetered string // why no usage was read
	Err       error
}

// EgressCall is a metered egress call in flight; End records it.
type EgressCall struct {
	g     *Gateway
	c     *call
	req   EgressRequest
	res   *reservation
	ended bool
}

// BeginEgress checks the budgets that apply to a brokered call before it
// is forwarded, reserving an estimate (a quarter of the body's bytes in,
// llm.reserve_tokens out; the model is not known yet, so no cost) against
// each. A spent budget refuses the call: status 429 and an error body in
// the provider's shape, audited. The call's End must be called otherwise.
func (g *Gateway) BeginEgress(ctx context.Context, r EgressRequest) (*EgressCall, int, []byte) {
	prov, ok := g.egress[strings.ToLower(strings.TrimSuffix(r.Host, "."))]
	if !ok {
		return nil, 0, nil
	}
	if r.Principal == "" {
		r.Principal = "sandbox:" + r.SandboxID // an owner the daemon could not tell (a usage row needs one)
	}
	kind := prov.kind
	if kind == "" {
		kind = map[bool]string{true: "anthropic", false: "openai"}[r.API == "messages"]
	}
	c := &call{prov: &config.LLMProvider{Name: prov.name, Kind: kind}, api: r.API, start: g.cfg.Now(), agent: r.Agent,
		sandbox: r.SandboxID, outcome: govern.AuditSuccess,
		ident:  auth.Identity{Principal: store.Principal{ID: r.Principal}},
		action: &govern.Action{RequestID: newRequestID()}}
	c.detail = map[string]any{"via": "egress", "provider": prov.name, "api": r.API, "host": r.Host, "path": r.Path}
	if r.SandboxID != "" {
		c.detail["sandbox"] = r.SandboxID
	}
	if r.Agent != "" {
		c.detail["agent"] = r.Agent
	}
	e := &EgressCall{g: g, c: c, req: r}
	est := g.cfg.LLM.ReserveTokens
	if r.Bytes > 0 {
		est += r.Bytes / 4
	}
	budgets := g.settings().budgets
	var berr error
	if g.cfg.AgentBudgets != nil && r.Agent != "" {
		var more []config.LLMBudget
		if more, berr = g.cfg.AgentBudgets(ctx, r.Agent); len(more) > 0 {
			budgets = append(slices.Clone(budgets), more...)
		}
	}
	res, b, why, err := g.meter.reserve(ctx, budgets, r.Principal, r.Agent, g.cfg.Now(), spend{tokens: est})
	if err = cmp.Or(berr, err); err != nil {
		g.log.Error("llm egress: budgets", "sandbox", r.SandboxID, "err", err)
		c.outcome, c.detail["error"] = govern.AuditError, "cannot check budgets now"
		g.auditEgress(ctx, c)
		return nil, http.StatusServiceUnavailable, errorBody(kind, "api_error", "warden: cannot check LLM budgets now")
	}
	if b != "" {
		c.outcome, c.detail["budget"], c.detail["reason"] = govern.AuditDenied, b, why
		g.auditEgress(ctx, c)
		return nil, http.StatusTooManyRequests, errorBody(kind, "budget_exceeded", why)
	}
	e.res = res
	return e, 0, nil
}

// End records the call: when the provider answered, its usage (tokens
// from the response's usage fields, cost from the price table) in the
// sandbox's llm_usage row; in every case the llm.call audit event. The
// reservation is released. Later calls are no-ops.
func (e *EgressCall) End(ctx context.Context, r EgressResult) {
	if e == nil || e.ended {
		return
	}
	e.ended = true
	g, c := e.g, e.c
	defer g.meter.release(e.res)
	ctx = context.WithoutCancel(ctx)
	c.model = cmp.Or(r.Model, "unknown")
	c.price, c.priced = priceFor(g.settings().prices, c.model)
	c.detail["model"], c.detail["stream"] = c.model, r.Stream
	if r.Status != 0 {
		c.detail["status"] = r.Status
	}
	if r.Status == 0 || r.Status >= 400 || r.Err != nil {
		c.outcome = govern.AuditError
	}
	if r.Err != nil {
		c.detail["error"] = r.Err.Error()
	}
	if r.Unmetered != "" && r.Status != 0 && r.Status < 400 {
		c.detail["unmetered"] = r.Unmetered
	}
	if r.Status == 0 { // nothing reached the provider, or nothing came back
		g.auditEgress(ctx, c)
		return
	}
	in, out := r.Usage.In(), r.Usage.Out()
	cost := c.price.cost(in, out)
	u := store.LLMUsage{PrincipalID: c.ident.Principal.ID, Agent: c.agent, Day: g.cfg.Now().UTC().Format(time.DateOnly),
		Provider: c.prov.Name, Model: c.model, SandboxID: c.sandbox, Calls: 1, TokensIn: in, TokensOut: out, CostMicros: cost}
	if err := g.cfg.Usage.AddLLMUsage(ctx, u); err != nil {
		g.log.Error("llm egress: record usage", "sandbox", c.sandbox, "err", err)
		c.detail["usage_error"] = "the usage was not recorded"
	}
	c.detail["tokens_in"], c.detail["tokens_out"], c.detail["cost_micros"] = in, out, cost
	if !c.priced {
		c.detail["unpriced"] = true
	}
	g.observe(c, in, out, cost)
	g.observeSandbox(c, "egress", in, out, cost)
	g.auditEgress(ctx, c)
}

// auditEgress writes the call's llm.call audit event (and counts it). It
// is no decided action: the broker decided the secret's use (secret.use).
func (g *Gateway) auditEgress(ctx context.Context, c *call) {
	c.detail["duration_ms"] = g.cfg.Now().Sub(c.start).Milliseconds()
	g.countCall(c)
	target := "llm:" + c.prov.Name + "/" + cmp.Or(c.model, "unknown")
	ev := govern.AuditEvent{RequestID: c.action.RequestID, Principal: c.ident.Principal.ID, Name: string(govern.KindLLMCall),
		Target: target, Outcome: c.outcome, Detail: c.detail}
	if err := g.cfg.Audit.Write(ctx, ev); err != nil {
		g.log.Warn("llm egress: audit", "err", fmt.Errorf("write llm.call: %w", err))
	}
}
