package daemon

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/warden-sandbox/warden/internal/llmgw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

// buildLLM builds the LLM gateway (docs/llm.md), served at /llm/ on the
// API listener; its upstream calls go through the safe dialer.
func (d *daemon) buildLLM() error {
	cfg := d.cfg
	var deny []netip.Prefix
	for _, c := range cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	dial, err := safedial.New(safedial.Options{Dest: network.NewDestinationPolicy(deny),
		Allow: cfg.LLM.AllowHosts, AllowHTTP: cfg.LLM.AllowHTTP,
		// Streams are long; the gateway bounds what it reads itself.
		MaxResponseBytes: -1, MaxRedirects: -1})
	if err != nil {
		return fmt.Errorf("llm gateway: dialer: %w", err)
	}
	// Usage, prices and budgets set at run time persist in the database.
	us, _ := d.st.(llmgw.UsageStore)
	gw, err := llmgw.New(llmgw.Config{LLM: cfg.LLM, Auth: d.authn, Govern: d.gov, Audit: d.audits, Secrets: d.vault,
		Client: dial.Client(), Log: d.log.With("subsystem", "llm"), Usage: us, Timeline: d.llmTimeline(),
		AgentBudgets: d.agentLLMBudgets, OnUsage: d.llmRunUsage}) // hosted agents' budgets, runs' usage (agentroute.go)
	if err != nil {
		return err
	}
	if err := d.srv.RegisterCollector(gw.Collector()); err != nil {
		return fmt.Errorf("llm gateway: metrics: %w", err)
	}
	// The series by sandbox (their label summed away unless
	// metrics.per_sandbox_labels).
	if err := d.srv.RegisterCollector(gw.SandboxCollector()); err != nil {
		return fmt.Errorf("llm gateway: metrics: %w", err)
	}
	d.log.Debug("llm: model calls to these hosts through the egress broker are metered", "hosts", gw.EgressHosts())
	d.llm = gw
	return nil
}

// withLLM serves the LLM gateway beside the API.
func (d *daemon) withLLM(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, llmgw.PathPrefix) {
			d.llm.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// llmTimeline is where the gateway records prompts and responses: the
// Agent Monitor, or nowhere when it is disabled.
func (d *daemon) llmTimeline() llmgw.Timeline {
	if d.mon == nil {
		return nil
	}
	return d.mon
}
