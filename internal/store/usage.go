package store

import (
	"context"
	"encoding/json"
	"time"
)

// UsageStore persists usage and cost (internal/usage, internal/llmgw) and
// the signed checkpoints of the audit log (internal/audit). *sqlite.Store
// implements it; it is not part of Store.
type UsageStore interface {
	// AddLLMUsage adds u's calls, tokens and cost to the row of its
	// (principal, agent, day, provider, model, sandbox), creating it.
	AddLLMUsage(ctx context.Context, u LLMUsage) error
	// SumLLMUsage returns the tokens (in plus out) and cost in
	// micro-dollars of the rows the filter matches.
	SumLLMUsage(ctx context.Context, f LLMUsageFilter) (tokens, costMicros int64, err error)
	// ListLLMUsage returns the rows the filter matches, ordered by day,
	// principal, agent, provider, model, sandbox.
	ListLLMUsage(ctx context.Context, f LLMUsageFilter) ([]LLMUsage, error)

	// GetUsageSetting returns a run-time setting's JSON value, or
	// ErrNotFound when it was never set (or was deleted).
	GetUsageSetting(ctx context.Context, name string) (UsageSetting, error)
	// PutUsageSetting sets it, replacing an earlier value.
	PutUsageSetting(ctx context.Context, s UsageSetting) error
	// DeleteUsageSetting removes it (ErrNotFound when absent).
	DeleteUsageSetting(ctx context.Context, name string) error

	// AddAuditCheckpoint records a signed checkpoint; its N must be one
	// more than the last one's (ErrConflict otherwise).
	AddAuditCheckpoint(ctx context.Context, c AuditCheckpoint) error
	// ListAuditCheckpoints returns every checkpoint in order of N.
	ListAuditCheckpoints(ctx context.Context) ([]AuditCheckpoint, error)
}

// LLMUsage is the LLM use of one principal (and agent) of one model on
// one UTC day, from one sandbox or from none.
type LLMUsage struct {
	PrincipalID string `json:"principal"`
	Agent       string `json:"agent"` // "" when the calls named none
	Day         string `json:"day"`   // YYYY-MM-DD
	Provider    string `json:"provider"`
	Model       string `json:"model"`
	// SandboxID is the sandbox the calls came from (through the
	// warden.internal route or the egress broker); "" for none.
	SandboxID  string `json:"sandbox,omitempty"`
	Calls      int64  `json:"calls"`
	TokensIn   int64  `json:"tokens_in"`
	TokensOut  int64  `json:"tokens_out"`
	CostMicros int64  `json:"cost_micros"`
}

// LLMUsageFilter selects usage rows: empty fields match everything;
// Principals matches any of them; FromDay and ToDay (YYYY-MM-DD) are
// inclusive.
type LLMUsageFilter struct {
	Principals []string
	Agent      string
	Sandbox    string // only this sandbox's calls
	FromDay    string
	ToDay      string
}

// UsageSetting is a named JSON setting edited at run time.
type UsageSetting struct {
	Name      string
	Value     json.RawMessage
	UpdatedAt time.Time
	UpdatedBy string
}

// AuditCheckpoint is a signed head of the audit log's Merkle tree.
type AuditCheckpoint struct {
	N         int64
	Size      int64
	Root      string // base64
	Note      string // the signed note, as published
	CreatedAt time.Time
}
