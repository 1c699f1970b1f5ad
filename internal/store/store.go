// Package store defines the persistence interface of wardend: sandboxes,
// principals, API keys and audit events.
//
// The default implementation is internal/store/sqlite (an embedded SQLite
// file); others (PostgreSQL) implement the same Store interface and prove it
// by running the shared conformance suite in internal/store/storetest.
//
// Records are plain structs without behaviour. The store does not know the
// sandbox state machine, the meaning of scopes or how audit hashes are
// computed; it persists what it is given and enforces only identity
// (unique IDs), references (a key's principal exists) and atomicity
// (UpdateSandbox is a read-modify-write in one transaction).
//
// Times are stored with nanosecond precision in UTC; a zero time.Time means
// "not set" (NULL) and comes back as the zero value.
package store

import (
	"context"
	"encoding/json"
	"time"
)

// Store is the persistence interface of wardend. All methods are safe for
// concurrent use. Errors wrap ErrNotFound, ErrConflict or ErrInvalid where
// those apply.
type Store interface {
	// CreateSandbox inserts a new sandbox. The ID must be unique
	// (ErrConflict otherwise) and Owner must name an existing principal
	// (ErrNotFound otherwise). A non-empty Name must not be used by
	// another live sandbox of the same owner (ErrNameInUse otherwise; see
	// Sandbox.Name).
	CreateSandbox(ctx context.Context, sb Sandbox) error

	// GetSandbox returns the sandbox with the given ID or ErrNotFound.
	GetSandbox(ctx context.Context, id string) (Sandbox, error)

	// UpdateSandbox reads the sandbox, passes it to fn and writes back
	// what fn left in it, all in one transaction, so two concurrent
	// updates never lose each other's changes. fn sees the current
	// committed state; it enforces transitions by returning an error
	// (typically wrapping ErrConflict) when the state is not the one it
	// expects, in which case nothing is written and UpdateSandbox returns
	// that error. fn may run more than once if the implementation retries
	// a serialisation failure, so it must not have side effects outside
	// the record. fn must not change the ID. The updated record is
	// returned.
	//
	// Example, a start that only succeeds from "starting":
	//
	//	sb, err := st.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
	//		if sb.State != "starting" {
	//			return fmt.Errorf("sandbox is %s: %w", sb.State, store.ErrConflict)
	//		}
	//		sb.State, sb.StartedAt = "running", now
	//		return nil
	//	})
	UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (Sandbox, error)

	// ListSandboxes returns one page of sandboxes matching the filter,
	// ordered by CreatedAt descending, then ID descending, and the token of
	// the next page ("" on the last page). The order is stable: paging
	// through with the returned tokens visits every matching sandbox that
	// existed before the first call exactly once.
	ListSandboxes(ctx context.Context, f SandboxFilter) (sandboxes []Sandbox, nextPageToken string, err error)

	// DeleteSandbox removes a sandbox record. Sandboxes are normally kept
	// in a terminal state for history; this exists for tests and cleanup.
	DeleteSandbox(ctx context.Context, id string) error

	// CreatePrincipal inserts a principal and, in the same transaction,
	// the given API keys (whose PrincipalID must be p.ID). Either all of
	// them are stored or none is.
	CreatePrincipal(ctx context.Context, p Principal, keys ...APIKey) error

	// GetPrincipal returns the principal with the given ID or ErrNotFound.
	GetPrincipal(ctx context.Context, id string) (Principal, error)

	// ListPrincipals returns all principals ordered by creation time.
	ListPrincipals(ctx context.Context) ([]Principal, error)

	// CountPrincipals returns the number of principals.
	CountPrincipals(ctx context.Context) (int, error)

	// CreateKey inserts an API key. The ID must be unique (ErrConflict)
	// and the principal must exist (ErrNotFound).
	CreateKey(ctx context.Context, k APIKey) error

	// GetKeyByID returns the key with the given ID, revoked or not, or
	// ErrNotFound.
	GetKeyByID(ctx context.Context, id string) (APIKey, error)

	// ListKeys returns the keys of one principal, or of all principals
	// when principalID is "", ordered by creation time.
	ListKeys(ctx context.Context, principalID string) ([]APIKey, error)

	// RevokeKey marks a key revoked at the given time and returns it. Revoking
	// an already revoked key keeps the first RevokedAt and succeeds.
	RevokeKey(ctx context.Context, id string, at time.Time) (APIKey, error)

	// TouchKey records that a key was used at the given time. It only
	// moves LastUsedAt forward.
	TouchKey(ctx context.Context, id string, at time.Time) error

	// AppendAudit inserts one audit event exactly as given (the audit
	// package computes Seq, PrevHash and Hash). A Seq already present is
	// ErrConflict.
	AppendAudit(ctx context.Context, e AuditEvent) error

	// LastAudit returns the event with the highest Seq, or ErrNotFound
	// when the log is empty.
	LastAudit(ctx context.Context) (AuditEvent, error)

	// ListAudit returns events with Seq > f.After matching the filter, in
	// ascending Seq order, at most f.Limit of them.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEvent, error)

	// WalkAudit calls fn for every stored event in ascending Seq order,
	// from one consistent snapshot, without loading them all into memory.
	// It stops at the first error fn returns and returns it.
	WalkAudit(ctx context.Context, fn func(AuditEvent) error) error

	// GovernStore holds governance policies and approvals (govern.go).
	GovernStore

	// MCPStore holds the MCP gateway's connectors, virtual servers,
	// grants, tool pins and credential bindings (mcp.go).
	MCPStore

	// Close releases the store's resources.
	Close() error
}

// Lifecycle says what happens at a sandbox's timeout: by default it is
// killed; with AutoPause it is paused instead, and with AutoResume a call
// that reaches it while paused resumes it. Timeout is the sandbox's timeout:
// a resume gives back at least that much (see ResumeTimeout).
type Lifecycle struct {
	AutoPause  bool          `json:"auto_pause,omitempty"`
	AutoResume bool          `json:"auto_resume,omitempty"`
	Timeout    time.Duration `json:"timeout_ns,omitempty"`
	// ResumeTimeout, while the sandbox is paused, is the time it keeps
	// when resumed: its countdown, frozen at the pause (at least Timeout).
	// Zero when it is not paused.
	ResumeTimeout time.Duration `json:"resume_timeout_ns,omitempty"`
	// PausedAt, while the sandbox is paused, is when it was paused; zero
	// when it is not paused (or was paused before this was recorded).
	PausedAt time.Time `json:"paused_at,omitzero"`
	// NoSudo: the sandbox was created with sudo off (CreateRequest.NoSudo).
	NoSudo bool `json:"no_sudo,omitempty"`
	// Cold, while the sandbox is paused, says its pause kept only its
	// files (E2B's pause with keepMemory false): no process of it is left,
	// and a resume boots it again on its kept writable layer
	// (internal/sandbox/coldpause.go). False when it is not paused.
	Cold bool `json:"cold,omitempty"`
	// AutoPauseCold: the pause at the timeout (AutoPause) keeps only the
	// files, as Cold (E2B's autoPauseMemory false).
	AutoPauseCold bool `json:"auto_pause_cold,omitempty"`
	// IdleTimeout, when set, pauses the sandbox (or kills it, IdleKill)
	// after that long without activity; MaxLifetime kills it that long
	// after its creation; PausedRetention deletes it once paused that
	// long (internal/sandbox/lifetime.go). Zero: none.
	IdleTimeout     time.Duration `json:"idle_timeout_ns,omitempty"`
	IdleKill        bool          `json:"idle_kill,omitempty"`
	MaxLifetime     time.Duration `json:"max_lifetime_ns,omitempty"`
	PausedRetention time.Duration `json:"paused_retention_ns,omitempty"`
}

// Sandbox is the stored form of a sandbox. State is opaque to the store;
// internal/sandbox owns the state machine.
type Sandbox struct {
	ID string
	// Name is an optional name chosen by the owner ("" for none). Among
	// the live sandboxes of one owner (every state but stopped, failed
	// and lost) a name is unique; the store enforces that as well, so a
	// store that implements it knows those three states. Its syntax is
	// internal/sandbox's (ValidName).
	Name       string
	Template   string
	TemplateID string // content id of the template version it booted from
	Lifecycle  Lifecycle
	// Network is the sandbox's network policy as JSON (internal/network
	// owns its meaning); empty means none.
	Network json.RawMessage
	State   string
	Owner   string // principal ID
	Backend string

	CPUMillis int64
	MemoryMB  int64
	DiskMB    int64

	// Env is stored so the sandbox can be recreated after a restart; the
	// API never returns its values.
	Env      map[string]string
	Metadata map[string]string
	User     string
	Workdir  string

	CreatedAt time.Time
	StartedAt time.Time // zero until running
	ExpiresAt time.Time
	EndedAt   time.Time // zero until terminal
	EndReason string

	// Handle is the backend's serialised handle (versioned JSON the backend
	// owns), used to re-attach after a daemon restart. nil when unset.
	Handle json.RawMessage

	// EnvdKey is the ID of the API key the sandbox's E2B envd access token
	// is bound to ("" until one is): the token works only while that key
	// is valid (internal/e2b).
	EnvdKey string
}

// SandboxFilter selects sandboxes in ListSandboxes. Zero fields match
// everything.
type SandboxFilter struct {
	Owner    string            // only sandboxes of this principal
	Name     string            // only sandboxes with this name
	States   []string          // any of these states
	Metadata map[string]string // every key must be present with this value
	// Limit is the page size; <= 0 means DefaultPageSize, larger than
	// MaxPageSize means MaxPageSize.
	Limit int
	// PageToken is the nextPageToken of the previous call, "" for the
	// first page. A token is only meaningful with the same filter.
	PageToken string
}

// Page sizes of ListSandboxes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Principal kinds.
const (
	PrincipalUser  = "user"
	PrincipalAgent = "agent"
)

// Principal is an identity that owns keys and sandboxes.
type Principal struct {
	ID        string
	Kind      string // PrincipalUser or PrincipalAgent
	Name      string
	CreatedBy string // principal ID; "" for the bootstrap admin
	CreatedAt time.Time
}

// APIKey is a stored API key. Only a hash of the secret is stored.
type APIKey struct {
	ID          string
	PrincipalID string
	Name        string
	Prefix      string // the public part of the key, e.g. "wdn_ab12cd34"
	Hash        string // hex SHA-256 of the secret
	Scopes      []string
	CreatedAt   time.Time
	RevokedAt   time.Time // zero while the key is valid
	LastUsedAt  time.Time // zero if never used
}

// AuditEvent is one entry of the tamper-evident audit log. See
// internal/audit for how Seq, PrevHash and Hash are computed.
type AuditEvent struct {
	Seq         int64
	Time        time.Time
	RequestID   string
	PrincipalID string
	Action      string
	Target      string
	Outcome     string
	Detail      json.RawMessage // stored byte for byte
	PrevHash    string          // hex
	Hash        string          // hex
}

// AuditFilter selects audit events in ListAudit. Zero fields match
// everything.
type AuditFilter struct {
	After       int64 // only events with Seq > After
	Limit       int   // <= 0 means DefaultPageSize; capped at MaxPageSize
	Target      string
	PrincipalID string
	Action      string
}
