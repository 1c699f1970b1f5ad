package config

import "time"

// UsageConfig configures the signed checkpoints of the audit log
// (internal/audit, docs/security.md) and the sandbox usage meter
// (internal/usage, docs/usage.md).
type UsageConfig struct {
	// CheckpointInterval is how often a signed checkpoint of the audit
	// log (a Merkle tree head) is made when the log grew (default 1h;
	// negative turns checkpoints off).
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// CheckpointURL, when set, receives each checkpoint as a POST of the
	// signed note (text/plain), besides the file in the state directory.
	CheckpointURL string `yaml:"checkpoint_url"`
	// SampleInterval is how often the usage meter reads every live
	// sandbox's counters (default 5s; pauses, resumes and ends are read
	// at once whatever it is).
	SampleInterval time.Duration `yaml:"sample_interval"`
	// Retention is how long usage rows are kept (LLM usage by day,
	// sandbox usage by hour); older ones are deleted hourly. Zero keeps
	// them forever; at least 32 days otherwise (monthly LLM budgets sum
	// the whole month's rows).
	Retention time.Duration `yaml:"retention"`
}
