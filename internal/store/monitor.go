package store

import (
	"context"
	"encoding/json"
	"time"
)

// MonitorStore keeps the Agent Monitor's timeline (internal/monitor owns
// its meaning): one row per thing an agent did or reported, fed from the
// audit log (pointing at its seq) and from agents that report their
// activity (the ingest endpoint, Claude Code hooks). It is stored apart
// from the audit log: its own retention, and content (prompts, responses)
// that can be redacted without touching the hash chain.
// *sqlite.Store implements it.
type MonitorStore interface {
	// AppendMonitorEvents inserts events in one transaction and sets each
	// one's Seq (increasing, the timeline's cursor). IDs must be unique
	// (ErrConflict); Kind and Time are required (ErrInvalid).
	AppendMonitorEvents(ctx context.Context, evs []MonitorEvent) error
	// ListMonitorEvents returns events matching f ordered by Seq. With
	// f.Tail, the newest f.Limit matching events (still ordered by Seq).
	ListMonitorEvents(ctx context.Context, f MonitorFilter) ([]MonitorEvent, error)
	// GetMonitorEvent returns an event by ID or ErrNotFound.
	GetMonitorEvent(ctx context.Context, id string) (MonitorEvent, error)
	// RedactMonitorEvent removes an event's content (ErrNotFound if there
	// is no such event); the event, its digest and RedactedAt stay.
	RedactMonitorEvent(ctx context.Context, id string, at time.Time) (MonitorEvent, error)
	// ExpireMonitorContent removes the content of events older than
	// before (retention), marking them redacted at; it returns how many.
	ExpireMonitorContent(ctx context.Context, before, at time.Time) (int64, error)
	// DeleteMonitorEvents deletes events older than before; it returns
	// how many.
	DeleteMonitorEvents(ctx context.Context, before time.Time) (int64, error)
}

// MonitorEvent is one entry of the Agent Monitor's timeline.
type MonitorEvent struct {
	Seq  int64 // assigned by AppendMonitorEvents
	ID   string
	Time time.Time
	// Kind is what happened: a governed action kind (exec, file.read,
	// mcp.call, egress.connect, secret.use, llm.call, agent.tool, ...) or
	// an event kind (agent.prompt, agent.tool_result, llm.prompt, ...).
	Kind string
	// Source is where it came from: audit, ingest, hook or llm.
	Source    string
	Principal string // the actor's principal ID
	Agent     string // the agent principal acting, "" for humans
	Sandbox   string // the sandbox acted on or in, if any
	Session   string // the reporting agent's session (a Claude Code session_id)
	// Action is the audit event's action name or the hook event's name.
	Action string
	Target string
	// Outcome is success, denied or error ("" when not decided).
	Outcome string
	RuleID  string
	// Detail is JSON (the audit detail, the reported event's fields).
	Detail json.RawMessage
	// Content is the prompt, response or tool output text, kept until
	// redacted or expired; ContentSHA256 stays.
	Content       string
	ContentSHA256 string
	RedactedAt    time.Time
	AuditSeq      int64 // the audit event it mirrors, 0 for none
}

// MonitorFilter selects timeline events; empty fields match all.
type MonitorFilter struct {
	Agent, Principal, Sandbox, Session string
	Kinds                              []string // any of; a kind ending in "." matches by prefix
	Since, Until                       time.Time
	After                              int64 // Seq greater than
	Limit                              int   // 0: no limit
	Tail                               bool  // the newest Limit events
}
