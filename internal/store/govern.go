package store

import (
	"context"
	"encoding/json"
	"time"
)

// GovernStore persists governance policies, their version history and
// approvals (internal/govern owns their meaning). It is part of Store.
type GovernStore interface {
	// CreatePolicy inserts a policy at Version 1 (the store sets it) and
	// records that version in the history, in one transaction. The ID
	// must be unique (ErrConflict otherwise).
	CreatePolicy(ctx context.Context, p Policy) (Policy, error)

	// GetPolicy returns the current version of a policy or ErrNotFound.
	GetPolicy(ctx context.Context, id string) (Policy, error)

	// GetPolicyVersion returns one recorded version of a policy, also of
	// a deleted one, or ErrNotFound.
	GetPolicyVersion(ctx context.Context, id string, version int64) (Policy, error)

	// ListPolicies returns the current version of every policy ordered
	// by ID.
	ListPolicies(ctx context.Context) ([]Policy, error)

	// UpdatePolicy reads the policy, passes it to fn and writes back
	// what fn left in it with Version one higher, recording the new
	// version in the history, all in one transaction. fn must not change
	// ID or Version (ErrInvalid); an error from fn aborts the update and
	// is returned.
	UpdatePolicy(ctx context.Context, id string, fn func(*Policy) error) (Policy, error)

	// DeletePolicy removes a policy (ErrNotFound if there is none). Its
	// versions stay in the history, marked deleted.
	DeletePolicy(ctx context.Context, id string, at time.Time) error

	// CreateApproval inserts an approval; the ID must be unique
	// (ErrConflict otherwise).
	CreateApproval(ctx context.Context, a Approval) error

	// GetApproval returns an approval or ErrNotFound.
	GetApproval(ctx context.Context, id string) (Approval, error)

	// UpdateApproval is the read-modify-write of one approval in one
	// transaction, as UpdateSandbox is for sandboxes: fn sees the
	// committed record and returns an error (typically wrapping
	// ErrConflict) to leave it unchanged. fn must not change the ID.
	UpdateApproval(ctx context.Context, id string, fn func(*Approval) error) (Approval, error)

	// ListApprovals returns approvals matching the filter, newest first
	// (CreatedAt descending, then ID descending), at most f.Limit.
	ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error)
}

// Policy is the stored form of a governance policy. Document is the
// policy's body (rules and defaults) as JSON, stored byte for byte.
type Policy struct {
	ID        string
	Name      string
	Version   int64
	ScopeKind string
	ScopeID   string
	Document  json.RawMessage
	CreatedAt time.Time
	CreatedBy string
	UpdatedAt time.Time // when this version was written
	UpdatedBy string    // who wrote this version
	DeletedAt time.Time // only in GetPolicyVersion of a deleted policy
}

// Approval is the stored form of an approval request.
type Approval struct {
	ID            string
	Digest        string // hex SHA-256 of the canonical action
	PrincipalID   string // the requester
	OwnerID       string // the requester's owner, "" for none
	Kind          string
	Target        string
	RuleID        string
	PolicyID      string
	PolicyVersion int64
	Approvers     []string
	Message       string
	Action        json.RawMessage // the canonical action, stored byte for byte
	State         string          // pending, approved, rejected or expired
	CreatedAt     time.Time
	ExpiresAt     time.Time
	DecidedBy     string
	DecidedAt     time.Time
	Reason        string
	ConsumedAt    time.Time // when an approved action used it; zero until then
}

// ApprovalFilter selects approvals in ListApprovals. Zero fields match
// everything.
type ApprovalFilter struct {
	Digest      string
	PrincipalID string
	States      []string
	// Limit <= 0 means DefaultPageSize; capped at MaxPageSize.
	Limit int
}
