package daemon

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/agents"
)

// buildAgents builds the hosted agents' service (docs/agents.md); their
// runs' logs live under the state directory.
func (d *daemon) buildAgents() error {
	as, ok := d.st.(agents.Store)
	if !ok {
		return fmt.Errorf("hosted agents: the store does not keep agents")
	}
	publicURL := d.cfg.PublicURL
	if publicURL == "" && d.cfg.Listen != "" {
		publicURL = "http://" + d.cfg.Listen
	}
	// Runs reach the LLM and MCP gateways over their own network when
	// sandboxes have one (agentroute.go).
	var local string
	if d.net != nil {
		local = localURL
	}
	openai, anthropic := llmProviders(d.cfg.LLM)
	svc, err := agents.New(agents.Config{Store: as, Sandboxes: d.mgr, Keys: d.authn, Audit: d.audits,
		Log: d.log.With("subsystem", "agents"), LogDir: filepath.Join(d.cfg.StateDir, "agents", "runs"), PublicURL: publicURL,
		LocalURL: local, OpenAIProvider: openai, AnthropicProvider: anthropic,
		Secret: d.agentSecret, MaxRuns: d.cfg.Agents.MaxConcurrentRuns,
		Grants: d.agentGrants(), Policies: d.agentPolicies(), Teams: d.agentTeams()})
	if err != nil {
		return err
	}
	d.agents = svc
	return nil
}

// startAgents ends the runs an earlier daemon left running, then starts
// the dispatcher and the cron triggers; stopAgents ends the live runs.
func (d *daemon) startAgents(ctx context.Context) {
	if err := d.agents.Start(ctx); err != nil {
		d.log.Error("hosted agents: start", "err", err)
	}
}

func (d *daemon) stopAgents() {
	if d.agents != nil {
		d.agents.Close()
	}
	d.local.close()
}

// agentSecret reads a secret of the agent's owner by name (Slack's signing
// secret and bot token): it stays in wardend.
func (d *daemon) agentSecret(ctx context.Context, owner, name string) ([]byte, error) {
	if d.vault == nil {
		return nil, fmt.Errorf("secret %s: no secrets store", name)
	}
	sec, err := d.vault.Lookup(owner, name)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	v, _, err := d.vault.Current(sec.ID)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return v, nil
}

// agentPolicies attaches agents' spec policies to their principals (nil
// without a governance engine).
func (d *daemon) agentPolicies() agents.Policies {
	if d.gov == nil {
		return nil
	}
	return d.gov
}
