package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/warden-sandbox/warden/internal/govern"
)

// buildGovernance makes the governance engine (docs/governance.md) over the
// store and the audit log, with the config's governance section, and loads
// the stored policies: a stored policy that no longer compiles stops the
// daemon rather than leaving it unenforced.
func (d *daemon) buildGovernance(ctx context.Context) error {
	g := d.cfg.Governance
	cfg := govern.Config{
		Store:       d.st,
		Default:     govern.Outcome(g.Default),
		EvalTimeout: g.EvalTimeout,
		ApprovalTTL: g.ApprovalTTL,
		Audit:       d.alog,
		// The doors check access themselves (before reading a body) and
		// feed the result to the engine as its first stage.
		Access: govern.CheckedAccess(),
		Log:    d.log.With("subsystem", "govern"),
	}
	if w := g.ApprovalWebhook; w.URL != "" {
		secret, err := os.ReadFile(w.SecretFile)
		if err != nil {
			return fmt.Errorf("governance: read approval webhook secret: %w", err)
		}
		key := []byte(strings.TrimSpace(string(secret)))
		if len(key) == 0 {
			return fmt.Errorf("governance: approval webhook secret file %s is empty", w.SecretFile)
		}
		cfg.Announcer = &govern.Webhook{URL: w.URL, Secret: key}
	}
	mwStage, err := d.buildMiddleware()
	if err != nil {
		return fmt.Errorf("governance: %w", err)
	}
	if mwStage != nil {
		cfg.After = append(cfg.After, mwStage)
	}
	e := govern.New(cfg)
	if err := e.Load(ctx); err != nil {
		return fmt.Errorf("governance: %w", err)
	}
	d.gov = e
	return nil
}
