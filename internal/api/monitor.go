package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/monitor"
	"github.com/warden-sandbox/warden/internal/store"
)

// The Agent Monitor's routes (/v1/monitor, docs/monitor.md): agents that
// run elsewhere report their events (monitor:write), Claude Code's hooks
// post their input and get a rule's deny back, and monitor:read follows
// the timelines.

// nkMonitorReport is why the reporting routes are no governed action.
const nkMonitorReport = "records what an agent reports; a Claude Code PreToolUse is decided as agent.tool on the hook surface"

// MaxHookBody bounds a Claude Code hook's input (a PostToolUse carries
// the tool's whole output).
const MaxHookBody = 4 << 20

// maxMonitorWait bounds a long poll of GET /v1/monitor/events.
const maxMonitorWait = 60

func (s *Server) monitor() (*monitor.Monitor, error) {
	if s.cfg.Monitor == nil {
		return nil, apierr.Unavailable("the agent monitor is not enabled", nil)
	}
	return s.cfg.Monitor, nil
}

// monitorEventJSON is a timeline event as the API returns it.
type monitorEventJSON struct {
	Seq           int64           `json:"seq"`
	ID            string          `json:"id"`
	Time          string          `json:"time"`
	Kind          string          `json:"kind"`
	Source        string          `json:"source"`
	PrincipalID   string          `json:"principal_id"`
	AgentID       string          `json:"agent_id,omitempty"`
	SandboxID     string          `json:"sandbox_id,omitempty"`
	SessionID     string          `json:"session_id,omitempty"`
	Action        string          `json:"action,omitempty"`
	Target        string          `json:"target,omitempty"`
	Outcome       string          `json:"outcome,omitempty"`
	RuleID        string          `json:"rule_id,omitempty"`
	Detail        json.RawMessage `json:"detail,omitempty"`
	Content       string          `json:"content,omitempty"`
	ContentSHA256 string          `json:"content_sha256,omitempty"`
	RedactedAt    string          `json:"redacted_at,omitempty"`
	AuditSeq      int64           `json:"audit_seq,omitempty"`
}

func monitorEventOut(e store.MonitorEvent) monitorEventJSON {
	out := monitorEventJSON{Seq: e.Seq, ID: e.ID, Time: e.Time.UTC().Format(time.RFC3339Nano), Kind: e.Kind,
		Source: e.Source, PrincipalID: e.Principal, AgentID: e.Agent, SandboxID: e.Sandbox, SessionID: e.Session,
		Action: e.Action, Target: e.Target, Outcome: e.Outcome, RuleID: e.RuleID, Content: e.Content,
		ContentSHA256: e.ContentSHA256, AuditSeq: e.AuditSeq}
	if len(e.Detail) > 0 && json.Valid(e.Detail) {
		out.Detail = e.Detail
	}
	if !e.RedactedAt.IsZero() {
		out.RedactedAt = e.RedactedAt.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// ingestMonitorEvents is POST /v1/monitor/events: a batch of events the
// caller reports, attributed to its principal.
func (s *Server) ingestMonitorEvents(w http.ResponseWriter, r *http.Request) error {
	m, err := s.monitor()
	if err != nil {
		return err
	}
	var body struct {
		Events []monitor.IngestEvent `json:"events"`
	}
	if err := decodeJSON(r, &body, true); err != nil {
		return err
	}
	st := stateOf(r)
	p := st.ident.Principal
	evs, err := monitor.Ingested(body.Events, p.ID, p.Kind == store.PrincipalAgent, s.now())
	if err != nil {
		return apierr.Validation("%s", err.Error())
	}
	evs, err = m.Record(r.Context(), evs)
	if err != nil {
		return err
	}
	out := struct {
		Accepted int      `json:"accepted"`
		IDs      []string `json:"ids"`
		LastSeq  int64    `json:"last_seq"`
	}{Accepted: len(evs), IDs: make([]string, len(evs))}
	for i, e := range evs {
		out.IDs[i] = e.ID
		out.LastSeq = e.Seq
	}
	return writeJSON(w, http.StatusOK, out)
}

// claudeCodeHook is POST /v1/monitor/hooks/claude-code: a Claude Code
// hook's stdin JSON, recorded on the timeline; a PreToolUse is decided as
// agent.tool and a refusal answered in the hook output format (deny, or
// ask for require_approval), which blocks the tool call. The answer is
// always 200 with the hook output ({} when Warden has no objection).
func (s *Server) claudeCodeHook(w http.ResponseWriter, r *http.Request) error {
	m, err := s.monitor()
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxHookBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierr.PayloadTooLarge("hook input too large: the limit is 4 MiB")
		}
		return apierr.Wrap(apierr.CodeBadRequest, "read request body", err)
	}
	in, err := monitor.ParseClaudeCode(raw)
	if err != nil {
		return apierr.BadRequest("%s", err.Error())
	}
	st := stateOf(r)
	p := st.ident.Principal
	ev := in.Event(p.ID, p.Kind == store.PrincipalAgent)
	st.detail["hook_event_name"] = in.HookEventName
	st.detail["session_id"] = in.SessionID
	st.target = in.ToolName
	var answer monitor.ClaudeCodeOutput
	if in.HookEventName == "PreToolUse" && s.cfg.Govern != nil {
		tool := in.AgentTool()
		a := &govern.Action{Kind: govern.KindAgentTool, Surface: govern.SurfaceHook, RequestID: st.id,
			Principal: govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy}, AgentTool: tool}
		d, derr := s.cfg.Govern.Decide(r.Context(), a)
		if derr != nil {
			return derr
		}
		// The audit record keeps what identifies the call, not the tool's
		// input (a Write's file content): that is the timeline's content.
		rec := *a
		t := *tool
		t.Input = nil
		rec.AgentTool = &t
		st.governed = []govern.Decided{{Action: &rec, Decision: d}}
		ev.RuleID = d.RuleID
		if d.Err() != nil {
			ev.Outcome = govern.AuditDenied
			answer = monitor.ClaudeCodeAnswer(d)
		} else {
			ev.Outcome = govern.AuditSuccess
		}
	}
	if _, err := m.Record(r.Context(), []store.MonitorEvent{ev}); err != nil {
		return err
	}
	if err := writeJSON(w, http.StatusOK, answer); err != nil {
		return err
	}
	if ev.Outcome == govern.AuditDenied {
		s.commitAudit(r, govern.AuditDenied)
	}
	return nil
}

// listMonitorEvents is GET /v1/monitor/events: a page of the timeline,
// or with wait, a long poll that answers as soon as an event after the
// cursor matches.
func (s *Server) listMonitorEvents(w http.ResponseWriter, r *http.Request) error {
	m, err := s.monitor()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	cursor, err := queryInt(r, "cursor", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100, 1, store.MaxPageSize)
	if err != nil {
		return err
	}
	wait, err := queryInt(r, "wait", 0, 0, maxMonitorWait)
	if err != nil {
		return err
	}
	f := store.MonitorFilter{Agent: q.Get("agent"), Principal: q.Get("principal"), Sandbox: q.Get("sandbox"),
		Session: q.Get("session"), After: cursor, Limit: int(limit)}
	for _, k := range q["kind"] {
		for _, k := range strings.Split(k, ",") {
			if k = strings.TrimSpace(k); k != "" {
				f.Kinds = append(f.Kinds, k)
			}
		}
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(t.name); v != "" {
			if *t.to, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return apierr.BadRequest("query parameter %s: %q is not an RFC 3339 time", t.name, truncate(v, 64))
			}
		}
	}
	// Without a cursor or a start, the newest events (like tail).
	f.Tail = cursor == 0 && f.Since.IsZero()
	ctx := r.Context()
	deadline := time.NewTimer(time.Duration(wait) * time.Second)
	defer deadline.Stop()
	var evs []store.MonitorEvent
	for {
		changed := m.Changed()
		if evs, err = m.List(ctx, f); err != nil {
			return err
		}
		if len(evs) > 0 || wait == 0 {
			break
		}
		select {
		case <-changed:
			continue
		case <-deadline.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	out := struct {
		Events     []monitorEventJSON `json:"events"`
		NextCursor int64              `json:"next_cursor"`
	}{Events: make([]monitorEventJSON, 0, len(evs)), NextCursor: cursor}
	for _, e := range evs {
		out.Events = append(out.Events, monitorEventOut(e))
		out.NextCursor = e.Seq
	}
	return writeJSON(w, http.StatusOK, out)
}

// getMonitorEvent is GET /v1/monitor/events/{id}.
func (s *Server) getMonitorEvent(w http.ResponseWriter, r *http.Request) error {
	m, err := s.monitor()
	if err != nil {
		return err
	}
	e, err := m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, monitorEventOut(e))
}

// redactMonitorEvent is POST /v1/monitor/events/{id}/redact: the event's
// content is removed (its digest stays); the call is audited.
func (s *Server) redactMonitorEvent(w http.ResponseWriter, r *http.Request) error {
	m, err := s.monitor()
	if err != nil {
		return err
	}
	e, err := m.Redact(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["kind"] = e.Kind
	st.detail["content_sha256"] = e.ContentSHA256
	return writeJSON(w, http.StatusOK, monitorEventOut(e))
}

// nkMonitorRedact is why redaction is no governed action.
const nkMonitorRedact = "removes recorded content (admin only); audited"
