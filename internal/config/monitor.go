package config

import "time"

// MonitorConfig configures the Agent Monitor (docs/monitor.md).
type MonitorConfig struct {
	// ContentRetention is how long recorded content (prompts, tool input
	// and output) is kept before it is removed (its digest stays); 0 is
	// 30 days, negative keeps it forever.
	ContentRetention time.Duration `yaml:"content_retention"`
	// Retention is how long timeline events are kept; 0 is 90 days,
	// negative keeps them forever. The audit log keeps its own events
	// whatever this says.
	Retention time.Duration `yaml:"retention"`
	// Disabled turns the monitor off: no tap on the audit log, and the
	// /v1/monitor routes answer 503.
	Disabled bool `yaml:"disabled"`
	// NoLLMContent keeps the LLM gateway's prompts and responses off the
	// timeline's content (their events and digests stay).
	NoLLMContent bool `yaml:"no_llm_content"`
}
