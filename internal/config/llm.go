package config

// LLMConfig configures the LLM gateway (docs/llm.md): the providers it
// fronts, the price table and the budgets.
type LLMConfig struct {
	Providers []LLMProvider `yaml:"providers"`
	// Prices are per model pattern (path.Match: "gpt-4o*"), in dollars
	// per million tokens; the first match wins.
	Prices []LLMPrice `yaml:"prices"`
	// Budgets cap principals' use per day or month, in tokens or dollars.
	Budgets []LLMBudget `yaml:"budgets"`
	// RefuseUnpriced refuses calls to models the price table lacks.
	RefuseUnpriced bool `yaml:"refuse_unpriced"`
	// AllowHosts are the administrator's exceptions to the refusals of
	// the gateway's dialer (loopback, private, link-local, the host's own
	// addresses), for local model servers: "host", "host:port" or a CIDR.
	AllowHosts []string `yaml:"allow_hosts"`
	// AllowHTTP lets providers use plain http:// base URLs.
	AllowHTTP bool `yaml:"allow_http"`
	// ReserveTokens is the output estimate reserved against budgets
	// before a call that sets no max_tokens (default 1024).
	ReserveTokens int64 `yaml:"reserve_tokens"`
	// EgressHosts are more host names whose model calls a sandbox sends
	// through the egress broker (a brokered secret granted on the host)
	// are metered like the gateway's calls. Always metered: the hosts of
	// the providers' base URLs, api.openai.com and api.anthropic.com.
	EgressHosts []string `yaml:"egress_hosts"`
}

// LLMProvider is one upstream model API.
type LLMProvider struct {
	// Name is the provider's name in the gateway's paths: /llm/{name}/v1/...
	Name string `yaml:"name"`
	// Kind is the wire format: "openai" or "anthropic".
	Kind string `yaml:"kind"`
	// BaseURL is the API's root, e.g. https://api.openai.com/v1 or
	// https://api.anthropic.com (the gateway appends /chat/completions,
	// /embeddings, /responses or /v1/messages).
	BaseURL string `yaml:"base_url"`
	// KeySecret is the ID of the secret (warden secrets) holding the API
	// key; the key is never shown.
	KeySecret string `yaml:"key_secret"`
	// Models maps aliases the clients use to the provider's model names.
	Models map[string]string `yaml:"models"`
	// AllowModels, when set, are the only models (patterns, after alias
	// resolution) the provider may be asked for.
	AllowModels []string `yaml:"allow_models"`
}

// LLMPrice is the price of a model pattern, in dollars per million tokens.
type LLMPrice struct {
	Model  string  `yaml:"model" json:"model"`
	Input  float64 `yaml:"input" json:"input"`
	Output float64 `yaml:"output" json:"output"`
}

// LLMBudget caps the use of one principal (or of every principal, "*"),
// one agent (or every agent, "*") or a group of principals together.
// Exactly one of Principal, Agent and Group is set.
type LLMBudget struct {
	Name      string `yaml:"name" json:"name"`
	Principal string `yaml:"principal" json:"principal,omitempty"`
	// Agent is the calls' agent label (X-Warden-Agent, or the principal's
	// ID for principals of kind agent).
	Agent string `yaml:"agent" json:"agent,omitempty"`
	// Group is a list of principal IDs whose use counts together.
	Group []string `yaml:"group" json:"group,omitempty"`
	// Period is "day" or "month" (UTC).
	Period string `yaml:"period" json:"period"`
	// Tokens caps input plus output tokens; USD caps the cost. One of
	// them is set.
	Tokens int64   `yaml:"tokens" json:"tokens,omitempty"`
	USD    float64 `yaml:"usd" json:"usd,omitempty"`
}
