package monitor

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Tap returns an audit writer that appends through w and hands each
// stored event to the monitor (Observe, which never blocks): the writer
// govern.NewAuditLog is given, so every door's audit event reaches the
// timeline.
func (m *Monitor) Tap(w govern.AuditWriter) govern.AuditWriter { return &tap{w: w, m: m} }

// HookAuditAction is the audit action of the Claude Code hook route.
const HookAuditAction = "monitor.hook"

type tap struct {
	w govern.AuditWriter
	m *Monitor
}

func (t *tap) Append(ctx context.Context, e audit.Event) (audit.Event, error) {
	stored, err := t.w.Append(ctx, e)
	// A hook's decision is on the timeline already: the hook's own
	// event carries its outcome and rule.
	if stored.Seq > 0 && !(stored.Action == HookAuditAction && strings.Contains(string(stored.Detail), `"`+govern.AuditKey+`"`)) {
		t.m.Observe(stored)
	}
	return stored, err
}

func (t *tap) Verify(ctx context.Context) (audit.Report, error) { return t.w.Verify(ctx) }

// auditRecord is the part of a governed record (govern.AuditRecord under
// detail[govern.AuditKey]) the timeline reads.
type auditRecord struct {
	Action struct {
		Kind      string `json:"kind"`
		Surface   string `json:"surface"`
		SandboxID string `json:"sandbox_id"`
		Principal struct {
			ID   string `json:"id"`
			Kind string `json:"kind"`
		} `json:"principal"`
		AgentTool *struct {
			Session string `json:"session"`
		} `json:"agent_tool"`
	} `json:"action"`
	Decision struct {
		Outcome string `json:"outcome"`
		RuleID  string `json:"rule_id"`
	} `json:"decision"`
}

// AuditEventID is the ID of the timeline event that mirrors audit event
// seq.
func AuditEventID(seq int64) string { return "evt_audit_" + strconv.FormatInt(seq, 10) }

// fromAudit mirrors a stored audit event: its kind is the governed
// action's kind when the event records a decided action, else the audit
// action's name.
func (m *Monitor) fromAudit(ctx context.Context, a store.AuditEvent) store.MonitorEvent {
	e := store.MonitorEvent{ID: AuditEventID(a.Seq), Time: a.Time.UTC(), Kind: a.Action, Source: SourceAudit,
		Principal: a.PrincipalID, Action: a.Action, Target: a.Target, Outcome: a.Outcome, AuditSeq: a.Seq,
		Detail: a.Detail}
	var rec auditRecord
	var detail map[string]json.RawMessage
	if len(a.Detail) > 0 && json.Unmarshal(a.Detail, &detail) == nil {
		if raw, ok := detail[govern.AuditKey]; ok && json.Unmarshal(raw, &rec) == nil && rec.Action.Kind != "" {
			e.Kind = rec.Action.Kind
			e.Sandbox = rec.Action.SandboxID
			e.RuleID = rec.Decision.RuleID
			if rec.Action.AgentTool != nil {
				e.Session = rec.Action.AgentTool.Session
			}
		}
	}
	if e.Sandbox == "" && strings.HasPrefix(a.Target, "sb-") {
		e.Sandbox = a.Target
	}
	if rec.Action.Principal.ID != "" && rec.Action.Principal.ID == a.PrincipalID {
		if rec.Action.Principal.Kind == store.PrincipalAgent {
			e.Agent = a.PrincipalID
		}
	} else if m.IsAgent(ctx, a.PrincipalID) {
		e.Agent = a.PrincipalID
	}
	return e
}
