package config

import (
	"strings"
	"testing"
)

func TestAgentsMaxConcurrentRuns(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, true}, {8, true}, {MaxAgentRuns, true}, {-1, false}, {MaxAgentRuns + 1, false}} {
		c := Default()
		c.Agents.MaxConcurrentRuns = tc.n
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("max_concurrent_runs %d: %v", tc.n, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "agents.max_concurrent_runs")) {
			t.Errorf("max_concurrent_runs %d: got %v, want a refusal naming it", tc.n, err)
		}
	}
}
