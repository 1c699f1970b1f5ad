package config

// MiddlewareConfig is one administrator-written JavaScript hook run on the
// governed path after the rules (internal/mw; docs/guardrails.md,
// "Middleware"). The daemon compiles each at start and refuses to start on
// an invalid one.
type MiddlewareConfig struct {
	// Name identifies it in decisions and the audit log.
	Name string `yaml:"name"`
	// Kinds are the action kinds it runs for (mcp.call, exec, ...).
	Kinds []string `yaml:"kinds"`
	// ScriptFile is the JavaScript file defining pre and/or post.
	ScriptFile string `yaml:"script_file"`
	// OnError is closed (default: a failing script refuses the action)
	// or open (it lets the action through).
	OnError string `yaml:"on_error"`
	// TimeoutMS bounds each call (0: 200 ms; at most 5000).
	TimeoutMS int64 `yaml:"timeout_ms"`
	// MaxMemoryMB bounds heap growth during a call (0: 64).
	MaxMemoryMB int64 `yaml:"max_memory_mb"`
	// AllowedDomains are the hosts fetch may reach (public addresses,
	// HTTPS only).
	AllowedDomains []string `yaml:"allowed_domains"`
	// Secrets are the secret names its script may read (secrets.NAME),
	// once an administrator grants it a secret of that name
	// (POST /v1/secrets/{id}/grants with "middleware").
	Secrets []string `yaml:"secrets"`
	// Disabled keeps it configured but not run.
	Disabled bool `yaml:"disabled"`
}
