package govern

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
)

// The governed path's last step, "audit with the decision"
// (docs/governance.md): the doors (internal/api, internal/e2b, the MCP
// gateway internal/mcpgw, the egress path's internal/network and
// internal/broker) describe
// what a call did and hand it, with the actions the engine decided for it,
// to an AuditLog, which writes the call's one audit event. The doors hold
// an *AuditLog, never the audit logger itself, so they neither write
// events on their own nor import internal/audit (TestDoorsDoNotImportAudit);
// reading the log back (the audit routes, policy dry runs) goes through
// the AuditLog too.

// Outcomes an audit event records: what came of the call.
const (
	AuditSuccess = audit.OutcomeSuccess
	AuditDenied  = audit.OutcomeDenied
	AuditError   = audit.OutcomeError
)

// GovernMoreKey is the key of an event's detail under which the records of
// the call's further decided actions are kept (a multipart upload decided
// per file), after the decisive one under AuditKey.
const GovernMoreKey = "govern_more"

// AuditReport is the result of verifying the audit log.
type AuditReport = audit.Report

// Decided is an action and the engine's decision on it.
type Decided struct {
	Action   *Action
	Decision Decision
}

// AuditEvent is one call's audit event as a door describes it.
type AuditEvent struct {
	RequestID string
	// Principal is the actor's id ("system" for the daemon's own events,
	// "" when no key was sent).
	Principal string
	// Name is the event's action ("process.exec", "e2b.envd",
	// "sandbox.end").
	Name    string
	Target  string
	Outcome string // AuditSuccess, AuditDenied or AuditError
	// Detail is the door's detail of the call (not modified).
	Detail map[string]any
	// Governed are the actions the call was decided as, the decisive one
	// first: its Record goes under detail[AuditKey], the others' under
	// detail[GovernMoreKey]. None for events that are no decided action
	// (reads, system events, calls without an engine).
	Governed []Decided
}

// AuditWriter is the tamper-evident log an AuditLog writes to and verifies
// (*audit.Logger).
type AuditWriter interface {
	Auditor
	Verify(ctx context.Context) (audit.Report, error)
}

// AuditReader reads the stored log (store.Store).
type AuditReader interface {
	LastAudit(ctx context.Context) (store.AuditEvent, error)
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error)
}

// AuditLog writes the doors' audit events and reads the log back. Safe
// for concurrent use.
type AuditLog struct {
	w   AuditWriter
	r   AuditReader
	log *slog.Logger
}

// NewAuditLog returns an AuditLog that appends through w and reads through
// r (the store w appends to). log receives append failures; slog.Default()
// when nil.
func NewAuditLog(w AuditWriter, r AuditReader, log *slog.Logger) (*AuditLog, error) {
	if w == nil || r == nil {
		return nil, errors.New("new audit log: no audit logger or store")
	}
	if log == nil {
		log = slog.Default()
	}
	return &AuditLog{w: w, r: r, log: log}, nil
}

// Write appends the call's audit event, with the governed records in its
// detail. The event is written even when ctx is cancelled (the call ended
// because its client went away). A failure is logged and returned.
func (l *AuditLog) Write(ctx context.Context, ev AuditEvent) error {
	detail := ev.Detail
	if len(ev.Governed) > 0 {
		detail = maps.Clone(detail)
		if detail == nil {
			detail = map[string]any{}
		}
		g := ev.Governed[0]
		detail[AuditKey] = Record(g.Action, g.Decision)
		if len(ev.Governed) > 1 {
			more := make([]AuditRecord, 0, len(ev.Governed)-1)
			for _, g := range ev.Governed[1:] {
				more = append(more, Record(g.Action, g.Decision))
			}
			detail[GovernMoreKey] = more
		}
	}
	var raw json.RawMessage
	if len(detail) > 0 {
		if b, err := json.Marshal(detail); err == nil {
			raw = scrubFound(b, ev.Governed)
		} else {
			l.log.Error("encode audit event detail", "request_id", ev.RequestID, "action", ev.Name, "err", err)
		}
	}
	_, err := l.w.Append(context.WithoutCancel(ctx), audit.Event{
		RequestID: ev.RequestID, PrincipalID: ev.Principal, Action: ev.Name,
		Target: ev.Target, Outcome: ev.Outcome, Detail: raw,
	})
	if err != nil {
		l.log.Error("append audit event", "request_id", ev.RequestID, "action", ev.Name, "target", ev.Target, "err", err)
		return err
	}
	return nil
}

// List returns stored events (store.Store.ListAudit).
func (l *AuditLog) List(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error) {
	return l.r.ListAudit(ctx, f)
}

// Last returns the newest stored event, or store.ErrNotFound when the log
// is empty.
func (l *AuditLog) Last(ctx context.Context) (store.AuditEvent, error) {
	return l.r.LastAudit(ctx)
}

// Verify checks the whole log (audit.Logger.Verify).
func (l *AuditLog) Verify(ctx context.Context) (AuditReport, error) {
	return l.w.Verify(ctx)
}
