package store

import (
	"context"
	"encoding/json"
	"time"
)

// AgentStore persists hosted agents (internal/agents owns their meaning):
// definitions with their versions, and runs. The sqlite store implements
// it beside Store.
type AgentStore interface {
	// CreateAgent inserts an agent and its version 1 (Version must be 1).
	// The ID and the Name must be unique (ErrConflict) and the principal
	// must exist (ErrNotFound).
	CreateAgent(ctx context.Context, a Agent) error
	// GetAgent returns an agent by ID or ErrNotFound.
	GetAgent(ctx context.Context, id string) (Agent, error)
	// GetAgentByName returns an agent by name or ErrNotFound.
	GetAgentByName(ctx context.Context, name string) (Agent, error)
	// ListAgents returns every agent ordered by name.
	ListAgents(ctx context.Context) ([]Agent, error)
	// UpdateAgentSpec stores spec as the agent's next version and returns
	// the agent as updated (ErrNotFound if there is none).
	UpdateAgentSpec(ctx context.Context, id string, spec json.RawMessage, by string, at time.Time) (Agent, error)
	// SetAgentSandbox records the agent's persistent sandbox ("" none).
	SetAgentSandbox(ctx context.Context, id, sandboxID string) error
	// DeleteAgent removes an agent with its versions and runs
	// (ErrNotFound if there is none).
	DeleteAgent(ctx context.Context, id string) error
	// ListAgentVersions returns an agent's versions, oldest first.
	ListAgentVersions(ctx context.Context, id string) ([]AgentVersion, error)

	// CreateAgentRun inserts a run; its agent must exist (ErrNotFound).
	CreateAgentRun(ctx context.Context, r AgentRun) error
	// GetAgentRun returns a run or ErrNotFound.
	GetAgentRun(ctx context.Context, id string) (AgentRun, error)
	// ListAgentRuns returns the runs matching f, newest first.
	ListAgentRuns(ctx context.Context, f AgentRunFilter) ([]AgentRun, error)
	// UpdateAgentRun is a read-modify-write in one transaction; fn must
	// not change the ID or the agent (ErrInvalid).
	UpdateAgentRun(ctx context.Context, id string, fn func(*AgentRun) error) (AgentRun, error)
}

// Agent run states.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunTimedOut  = "timed_out"
	RunCancelled = "cancelled"
)

// RunTerminal reports whether a run state is final.
func RunTerminal(state string) bool {
	return state == RunSucceeded || state == RunFailed || state == RunTimedOut || state == RunCancelled
}

// Agent is a hosted agent's definition. Spec is the current version's JSON
// (internal/agents defines it).
type Agent struct {
	ID            string
	Name          string
	PrincipalID   string // the agent's own principal (kind agent)
	OwnerID       string // the human who created it
	Version       int
	Spec          json.RawMessage
	WebhookSecret string
	SandboxID     string // the persistent sandbox, "" for none
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// AgentVersion is one version of an agent's spec.
type AgentVersion struct {
	AgentID   string
	Version   int
	Spec      json.RawMessage
	CreatedAt time.Time
	CreatedBy string
}

// AgentRun is one run of an agent.
type AgentRun struct {
	ID        string
	AgentID   string
	Version   int
	Trigger   string // manual, cron, webhook, slack
	Input     json.RawMessage
	State     string
	Reason    string
	SandboxID string
	KeyID     string
	ExitCode  *int
	CreatedBy string
	CreatedAt time.Time
	StartedAt time.Time
	EndedAt   time.Time
	// What the run spent on the LLM gateway with its own key.
	LLMCalls   int64
	TokensIn   int64
	TokensOut  int64
	CostMicros int64
}

// AgentRunFilter selects runs: by agent ("" all), by states (none: all),
// up to Limit (0: DefaultPageSize).
type AgentRunFilter struct {
	AgentID string
	States  []string
	Trigger string
	Limit   int
}
