package config

// WebhooksConfig configures the signed outgoing webhooks (docs/webhooks.md):
// endpoints that get the audit events of the kinds they name, signed in
// the Standard Webhooks format.
type WebhooksConfig struct {
	// AllowHosts are the administrator's exceptions to the destination
	// check (loopback, private and metadata addresses are refused
	// otherwise): "host", "host:port" or an address prefix.
	AllowHosts []string `yaml:"allow_hosts"`
	// AllowHTTP permits plain-HTTP endpoint URLs (HTTPS only otherwise).
	AllowHTTP bool              `yaml:"allow_http"`
	Endpoints []WebhookEndpoint `yaml:"endpoints"`
}

// WebhookEndpoint is one receiver.
type WebhookEndpoint struct {
	// Name identifies the endpoint (its delivery cursor is kept by name).
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Secret is the ID of the secret (warden secrets) holding the signing
	// key: "whsec_" and the key in base64, as Standard Webhooks libraries
	// take it, or the raw key (at least 16 bytes).
	Secret string `yaml:"secret"`
	// Events are the event types delivered: audit actions
	// (approval.request, sandbox.pause, sandbox.kill, llm.call, ...), the
	// derived llm.budget_exceeded, or globs of them ("sandbox.*", "*").
	Events []string `yaml:"events"`
	// Outcomes keeps only events with these outcomes (success, denied,
	// error); empty keeps all.
	Outcomes []string `yaml:"outcomes"`
	// MaxAttempts bounds the tries of one delivery (0: 12, about an
	// hour of backoff); the event is then given up on and logged.
	MaxAttempts int `yaml:"max_attempts"`
}
