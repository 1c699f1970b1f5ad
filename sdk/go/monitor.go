package warden

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MonitorEvent is one event of the Agent Monitor's timeline.
type MonitorEvent struct {
	Seq           int64          `json:"seq"`
	ID            string         `json:"id"`
	Time          time.Time      `json:"time"`
	Kind          string         `json:"kind"`
	Source        string         `json:"source"` // audit, ingest, hook or llm
	PrincipalID   string         `json:"principal_id"`
	AgentID       string         `json:"agent_id,omitempty"`
	SandboxID     string         `json:"sandbox_id,omitempty"`
	SessionID     string         `json:"session_id,omitempty"`
	Action        string         `json:"action,omitempty"`
	Target        string         `json:"target,omitempty"`
	Outcome       string         `json:"outcome,omitempty"`
	RuleID        string         `json:"rule_id,omitempty"`
	Detail        map[string]any `json:"detail,omitempty"`
	Content       string         `json:"content,omitempty"`
	ContentSHA256 string         `json:"content_sha256,omitempty"`
	RedactedAt    *time.Time     `json:"redacted_at,omitempty"`
	AuditSeq      int64          `json:"audit_seq,omitempty"`
}

// MonitorQuery filters [Client.ListMonitorEvents]; empty fields match all.
type MonitorQuery struct {
	Agent, Principal, Sandbox, Session string
	// Kinds keeps events of any of these kinds; a kind ending in "."
	// matches by prefix ("file." is file.read, file.write, ...).
	Kinds        []string
	Since, Until time.Time
	// Cursor keeps events after this seq (a page's NextCursor). With no
	// Cursor and no Since, the newest Limit events are returned.
	Cursor int64
	Limit  int
	// Wait, when set (at most a minute), makes the call wait for a
	// matching event when there is none yet: a long poll.
	Wait time.Duration
}

// MonitorPage is one page of the timeline.
type MonitorPage struct {
	Events     []MonitorEvent `json:"events"`
	NextCursor int64          `json:"next_cursor"`
}

// ListMonitorEvents returns one page of the Agent Monitor's timeline
// (monitor:read).
func (c *Client) ListMonitorEvents(ctx context.Context, q MonitorQuery) (MonitorPage, error) {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("agent", q.Agent)
	set("principal", q.Principal)
	set("sandbox", q.Sandbox)
	set("session", q.Session)
	set("kind", strings.Join(q.Kinds, ","))
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Cursor > 0 {
		v.Set("cursor", strconv.FormatInt(q.Cursor, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", strconv.Itoa(int((q.Wait+time.Second-1)/time.Second)))
	}
	var page MonitorPage
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/monitor/events", query: v, idempotent: true}, &page); err != nil {
		return MonitorPage{}, fmt.Errorf("list monitor events: %w", err)
	}
	return page, nil
}

// FollowMonitorEvents yields the timeline's events matching q as they
// happen, like tail -f: first the page q selects (the newest q.Limit
// without a cursor or start), then each new one, long-polling wait at a
// time (30 s when zero). It stops when ctx ends (yielding nothing more) or
// after yielding an error.
func (c *Client) FollowMonitorEvents(ctx context.Context, q MonitorQuery) iter.Seq2[MonitorEvent, error] {
	return func(yield func(MonitorEvent, error) bool) {
		wait := q.Wait
		if wait <= 0 {
			wait = 30 * time.Second
		}
		q.Wait = 0
		for {
			page, err := c.ListMonitorEvents(ctx, q)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				yield(MonitorEvent{}, err)
				return
			}
			for _, ev := range page.Events {
				if !yield(ev, nil) {
					return
				}
			}
			if page.NextCursor > q.Cursor {
				q.Cursor = page.NextCursor
			}
			// After the first page, only what follows it, from the cursor
			// (which now also bounds the start).
			if q.Cursor > 0 {
				q.Since = time.Time{}
			} else if q.Since.IsZero() {
				// Nothing matched yet: wait for the first event.
				q.Since = time.Unix(0, 0)
			}
			q.Wait = wait
		}
	}
}

// GetMonitorEvent returns one timeline event (monitor:read).
func (c *Client) GetMonitorEvent(ctx context.Context, id string) (MonitorEvent, error) {
	var ev MonitorEvent
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/monitor/events/" + url.PathEscape(id), idempotent: true}, &ev); err != nil {
		return MonitorEvent{}, fmt.Errorf("get monitor event %s: %w", id, err)
	}
	return ev, nil
}

// RedactMonitorEvent removes a timeline event's content, keeping its
// digest (admin). The redaction is audited.
func (c *Client) RedactMonitorEvent(ctx context.Context, id string) (MonitorEvent, error) {
	var ev MonitorEvent
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/monitor/events/" + url.PathEscape(id) + "/redact"}, &ev); err != nil {
		return MonitorEvent{}, fmt.Errorf("redact monitor event %s: %w", id, err)
	}
	return ev, nil
}

// ReportedEvent is an event an agent reports to the monitor. Who reported
// it is the key's principal.
type ReportedEvent struct {
	Time    time.Time      `json:"time,omitzero"`
	Kind    string         `json:"kind"`
	Session string         `json:"session,omitempty"`
	Action  string         `json:"action,omitempty"`
	Target  string         `json:"target,omitempty"`
	Outcome string         `json:"outcome,omitempty"` // success, denied or error
	Detail  map[string]any `json:"detail,omitempty"`
	Content string         `json:"content,omitempty"`
}

// IngestResult is the answer to [Client.ReportMonitorEvents].
type IngestResult struct {
	Accepted int      `json:"accepted"`
	IDs      []string `json:"ids"`
	LastSeq  int64    `json:"last_seq"`
}

// ReportMonitorEvents records up to 1000 events on the key's timeline
// (monitor:write).
func (c *Client) ReportMonitorEvents(ctx context.Context, events []ReportedEvent) (IngestResult, error) {
	var out IngestResult
	body := struct {
		Events []ReportedEvent `json:"events"`
	}{events}
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/monitor/events", json: body}, &out); err != nil {
		return IngestResult{}, fmt.Errorf("report monitor events: %w", err)
	}
	return out, nil
}

// ClaudeCodeHook posts a Claude Code hook's input (the JSON Claude Code
// writes to the hook's stdin) and returns the hook output to print: {}
// or a PreToolUse's permission decision (monitor:write).
func (c *Client) ClaudeCodeHook(ctx context.Context, input []byte) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/monitor/hooks/claude-code",
		body: bytes.NewReader(input), contentType: "application/json"}, &out); err != nil {
		return nil, fmt.Errorf("claude code hook: %w", err)
	}
	return out, nil
}
