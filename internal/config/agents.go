package config

import "fmt"

// MaxAgentRuns bounds agents.max_concurrent_runs.
const MaxAgentRuns = 1024

// AgentsConfig configures hosted agents (docs/agents.md).
type AgentsConfig struct {
	// MaxConcurrentRuns caps the runs of all agents at once (0: the
	// default, 8); more wait queued, oldest first.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs"`
}

func (a AgentsConfig) validate() error {
	if a.MaxConcurrentRuns < 0 || a.MaxConcurrentRuns > MaxAgentRuns {
		return fmt.Errorf("config: agents.max_concurrent_runs %d: want 1 to %d (0: the default, 8)", a.MaxConcurrentRuns, MaxAgentRuns)
	}
	return nil
}
