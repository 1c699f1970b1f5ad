package monitor

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// MaxIngestBatch is the most events one POST /v1/monitor/events takes.
const MaxIngestBatch = 1000

// IngestEvent is one event an agent reports through the ingest endpoint.
// Who reported it (principal, agent) is the caller's key, never the body.
type IngestEvent struct {
	Time    time.Time       `json:"time,omitzero"`
	Kind    string          `json:"kind"`
	Session string          `json:"session,omitempty"`
	Action  string          `json:"action,omitempty"`
	Target  string          `json:"target,omitempty"`
	Outcome string          `json:"outcome,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
	Content string          `json:"content,omitempty"`
}

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$`)

// Ingested validates reported events and returns them as timeline events
// of principal; now bounds their times (at most a minute ahead).
func Ingested(in []IngestEvent, principal string, isAgent bool, now time.Time) ([]store.MonitorEvent, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no events")
	}
	if len(in) > MaxIngestBatch {
		return nil, fmt.Errorf("%d events: at most %d per call", len(in), MaxIngestBatch)
	}
	out := make([]store.MonitorEvent, len(in))
	for i, ev := range in {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("events[%d]: %s", i, fmt.Sprintf(format, args...))
		}
		switch {
		case len(ev.Kind) > 64 || !kindRE.MatchString(ev.Kind):
			return nil, bad("kind %q: want lower-case dotted words (tool_call, agent.prompt), at most 64 bytes", cut(ev.Kind, 80))
		case len(ev.Session) > 256 || len(ev.Action) > 256 || len(ev.Target) > 4096:
			return nil, bad("session or action over 256 bytes, or target over 4096")
		case ev.Outcome != "" && ev.Outcome != "success" && ev.Outcome != "denied" && ev.Outcome != "error":
			return nil, bad("outcome %q: want success, denied or error", cut(ev.Outcome, 80))
		case ev.Time.After(now.Add(time.Minute)):
			return nil, bad("time %s is in the future", ev.Time.Format(time.RFC3339))
		case len(ev.Detail) > 64<<10:
			return nil, bad("detail over 64 KiB")
		}
		if len(ev.Detail) > 0 && string(ev.Detail) != "null" {
			var obj map[string]any
			if err := json.Unmarshal(ev.Detail, &obj); err != nil {
				return nil, bad("detail is not a JSON object")
			}
		} else {
			ev.Detail = nil
		}
		e := store.MonitorEvent{Time: ev.Time.UTC(), Kind: ev.Kind, Source: SourceIngest, Principal: principal,
			Session: ev.Session, Action: ev.Action, Target: ev.Target, Outcome: ev.Outcome, Detail: ev.Detail,
			Content: ev.Content}
		if ev.Time.IsZero() {
			e.Time = now.UTC()
		}
		if isAgent {
			e.Agent = principal
		}
		out[i] = e
	}
	return out, nil
}
