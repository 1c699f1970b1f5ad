package config

import (
	"fmt"
	"net/url"
	"time"
)

// GovernanceConfig configures the governance engine (docs/governance.md):
// what is decided when no rule and no policy default does, how long rules
// may take, and how approvals are kept and announced.
type GovernanceConfig struct {
	// Default is the outcome of an action no rule and no policy default
	// decides: allow (the default, so installations without policies keep
	// working), deny, require_approval or log_only. Per-kind defaults are
	// a policy's "defaults" (an installation-scoped policy for everyone).
	Default string `yaml:"default"`
	// EvalTimeout bounds the rules of one action (0: the engine's 1s).
	EvalTimeout time.Duration `yaml:"eval_timeout"`
	// ApprovalTTL is how long an approval request stays open and an
	// approval may be used once granted (0: the engine's 15m).
	ApprovalTTL time.Duration `yaml:"approval_ttl"`
	// ApprovalWebhook, when its URL is set, is POSTed every new pending
	// approval, signed with an HMAC of SecretFile's contents.
	ApprovalWebhook WebhookConfig `yaml:"approval_webhook"`
	// Middleware are JavaScript hooks run after the rules, in order.
	Middleware []MiddlewareConfig `yaml:"middleware"`
}

// WebhookConfig is an outgoing webhook: where it goes and the file holding
// its signing secret.
type WebhookConfig struct {
	URL string `yaml:"url"`
	// SecretFile holds the HMAC-SHA256 key of X-Warden-Signature; kept out
	// of the config file so the config can be world-readable.
	SecretFile string `yaml:"secret_file"`
}

func (c *Config) validateGovernance() error {
	g := c.Governance
	switch g.Default {
	case "", "allow", "deny", "require_approval", "log_only":
	default:
		return fmt.Errorf("config: governance.default %q: want allow, deny, require_approval or log_only", g.Default)
	}
	if g.EvalTimeout < 0 || g.ApprovalTTL < 0 {
		return fmt.Errorf("config: governance.eval_timeout and governance.approval_ttl must not be negative")
	}
	if w := g.ApprovalWebhook; w.URL != "" {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: governance.approval_webhook.url %q: want an http or https URL", w.URL)
		}
		if w.SecretFile == "" {
			return fmt.Errorf("config: governance.approval_webhook.secret_file is required with a url: receivers must be able to verify announcements")
		}
	}
	return nil
}
