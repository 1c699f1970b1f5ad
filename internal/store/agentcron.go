package store

import (
	"context"
	"time"
)

// AgentCronStore keeps the next fire time of hosted agents' cron
// triggers across restarts (internal/agents). The sqlite store implements
// it beside AgentStore.
type AgentCronStore interface {
	// ListAgentCron returns an agent's kept cron states.
	ListAgentCron(ctx context.Context, agentID string) ([]AgentCron, error)
	// PutAgentCron inserts or replaces a cron state; its agent must exist
	// (ErrNotFound). Deleting the agent deletes its states.
	PutAgentCron(ctx context.Context, c AgentCron) error
}

// AgentCron is the next fire time of the cron trigger at Index of an
// agent's spec, for the trigger's Schedule (schedule and time zone).
type AgentCron struct {
	AgentID  string
	Index    int
	Schedule string
	NextAt   time.Time
}
