package monitor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqliteOpen(t)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sqliteOpen(tb testing.TB) (*sqlite.Store, error) {
	st, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "w.db"))
	if err == nil {
		tb.Cleanup(func() { st.Close() })
	}
	return st, err
}

func hookInputs(t *testing.T) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob("testdata/claude-code/*.json")
	if len(files) < 10 {
		t.Fatalf("want the recorded hook payloads in testdata/claude-code, found %d", len(files))
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// TestClaudeCodeMapping: each recorded hook payload maps to its timeline
// kind, target, detail and content.
func TestClaudeCodeMapping(t *testing.T) {
	in := hookInputs(t)
	want := map[string]struct{ kind, target, detailKey, content string }{
		"01-session-start.json":            {"agent.session_start", "", "source", ""},
		"02-user-prompt-submit.json":       {"agent.prompt", "", "permission_mode", "The checkout tests fail"},
		"03-pre-tool-use-read.json":        {"agent.tool", "Read: /home/dev/shop-api/src/checkout/cart.ts", "file_path", `{"file_path":`},
		"04-post-tool-use-read.json":       {"agent.tool_result", "Read: /home/dev/shop-api/src/checkout/cart.ts", "tool_use_id", `"numLines":3`},
		"05-pre-tool-use-bash-denied.json": {"agent.tool", "Bash: rm -rf build/ node_modules/.cache", "command", `"command":"rm -rf`},
		"06-pre-tool-use-bash.json":        {"agent.tool", "Bash: npm test -- checkout", "command", ""},
		"07-post-tool-use-bash.json":       {"agent.tool_result", "Bash: npm test -- checkout", "command", "expected 30, got 3"},
		"08-pre-tool-use-edit.json":        {"agent.tool", "Edit: /home/dev/shop-api/src/checkout/cart.ts", "file_path", "old_string"},
		"09-pre-tool-use-mcp.json":         {"agent.tool", "mcp__github__create_issue", "server", "cart total ignores"},
		"10-stop.json":                     {"agent.stop", "", "hook_event_name", ""},
	}
	for name, raw := range in {
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: no expectation", name)
			continue
		}
		h, err := ParseClaudeCode(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		e := h.Event("pr-agent", true)
		if e.Kind != w.kind || e.Target != w.target || e.Source != SourceHook || e.Agent != "pr-agent" ||
			e.Session != "9f3c2a71-4b8e-4d2a-9c1e-5f6a7b8c9d0e" || e.Action != h.HookEventName {
			t.Errorf("%s: event %+v, want kind %q target %q", name, e, w.kind, w.target)
		}
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil || d[w.detailKey] == nil || d["client"] != ClientClaudeCode {
			t.Errorf("%s: detail %s lacks %q", name, e.Detail, w.detailKey)
		}
		if !strings.Contains(e.Content, w.content) || (e.Content != "") != (e.ContentSHA256 != "") {
			t.Errorf("%s: content %q (sha %q), want it to contain %q", name, e.Content, e.ContentSHA256, w.content)
		}
	}
	h, _ := ParseClaudeCode(in["09-pre-tool-use-mcp.json"])
	if tool := h.AgentTool(); tool.Server != "github" || tool.Tool != "create_issue" || tool.Client != ClientClaudeCode {
		t.Errorf("mcp tool split: %+v", tool)
	}
	for _, bad := range []string{`{}`, `{"session_id":"s"}`, `{"hook_event_name":"Stop"}`,
		`{"session_id":"s","hook_event_name":"PreToolUse"}`, `[1]`} {
		if _, err := ParseClaudeCode([]byte(bad)); err == nil {
			t.Errorf("ParseClaudeCode(%s): no error", bad)
		}
	}
}

func TestClaudeCodeAnswer(t *testing.T) {
	if b, _ := json.Marshal(ClaudeCodeAnswer(govern.Decision{Outcome: govern.Allow})); string(b) != "{}" {
		t.Errorf("allow answers %s, want {} (never \"allow\", which would skip Claude Code's prompts)", b)
	}
	b, _ := json.Marshal(ClaudeCodeAnswer(govern.Decision{Outcome: govern.Deny, Message: "no recursive deletes", RuleID: "no-rm"}))
	want := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Warden: no recursive deletes (rule no-rm)"}}`
	if string(b) != want {
		t.Errorf("deny answers %s, want %s", b, want)
	}
	if a := ClaudeCodeAnswer(govern.Decision{Outcome: govern.RequireApproval, ApprovalID: "apr_1"}); a.HookSpecificOutput == nil ||
		a.HookSpecificOutput.PermissionDecision != "ask" || !strings.Contains(a.HookSpecificOutput.PermissionDecisionReason, "apr_1") {
		t.Errorf("require_approval answers %+v", a.HookSpecificOutput)
	}
}

func TestIngested(t *testing.T) {
	now := time.Now()
	evs, err := Ingested([]IngestEvent{{Kind: "tool_call", Session: "s", Detail: json.RawMessage(`{"a":1}`), Content: "x"}},
		"pr-a", true, now)
	if err != nil || len(evs) != 1 || evs[0].Principal != "pr-a" || evs[0].Agent != "pr-a" || evs[0].Source != SourceIngest ||
		!evs[0].Time.Equal(now.UTC()) {
		t.Fatalf("ingested: %+v, %v", evs, err)
	}
	for _, bad := range [][]IngestEvent{nil, {{Kind: "Bad Kind"}}, {{Kind: "x", Outcome: "maybe"}},
		{{Kind: "x", Detail: json.RawMessage(`[1]`)}}, {{Kind: "x", Time: now.Add(time.Hour)}},
		make([]IngestEvent, MaxIngestBatch+1)} {
		if _, err := Ingested(bad, "pr-a", false, now); err == nil {
			t.Errorf("Ingested(%d events, first %+v): no error", len(bad), first(bad))
		}
	}
}

func first(evs []IngestEvent) IngestEvent {
	if len(evs) == 0 {
		return IngestEvent{}
	}
	return evs[0]
}

// fakeWriter stands in for the audit logger: it numbers events.
type fakeWriter struct {
	mu  sync.Mutex
	seq int64
}

func (w *fakeWriter) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	e.Seq, e.Time = w.seq, time.Now()
	return e, nil
}
func (w *fakeWriter) Verify(context.Context) (audit.Report, error) {
	return audit.Report{OK: true}, nil
}

// TestTap: audit events written through the tapped writer reach the
// timeline with the governed action's kind, sandbox, rule and agent.
func TestTap(t *testing.T) {
	st := openStore(t)
	agent := store.Principal{ID: "pr-agent1", Kind: store.PrincipalAgent, Name: "bot", CreatedAt: time.Now()}
	if err := st.CreatePrincipal(t.Context(), agent); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: st, Principals: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	al, err := govern.NewAuditLog(m.Tap(&fakeWriter{}), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &govern.Action{Kind: govern.KindExec, Surface: govern.SurfaceAPI, SandboxID: "sb-1",
		Principal: govern.Principal{ID: agent.ID, Kind: store.PrincipalAgent}, Exec: govern.NewExec([]string{"ls"}, "", "", nil)}
	ctx := t.Context()
	changed := m.Changed()
	al.Write(ctx, govern.AuditEvent{Principal: agent.ID, Name: "process.exec", Target: "sb-1", Outcome: govern.AuditDenied,
		Governed: []govern.Decided{{Action: a, Decision: govern.Decision{Outcome: govern.Deny, RuleID: "no-ls"}}}})
	al.Write(ctx, govern.AuditEvent{Principal: "system", Name: "sandbox.end", Target: "sb-1", Outcome: govern.AuditSuccess})
	al.Write(ctx, govern.AuditEvent{Principal: agent.ID, Name: "key.create", Target: "key_1", Outcome: govern.AuditSuccess})
	var evs []store.MonitorEvent
	deadline := time.After(10 * time.Second)
	for len(evs) < 3 {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("tapped events not on the timeline: %+v", evs)
		}
		changed = m.Changed()
		if evs, err = m.List(ctx, store.MonitorFilter{}); err != nil {
			t.Fatal(err)
		}
	}
	e := evs[0]
	if e.Kind != "exec" || e.Sandbox != "sb-1" || e.RuleID != "no-ls" || e.Agent != agent.ID || e.Outcome != "denied" ||
		e.AuditSeq != 1 || e.ID != AuditEventID(1) || e.Source != SourceAudit {
		t.Errorf("exec event: %+v", e)
	}
	if e := evs[1]; e.Kind != "sandbox.end" || e.Sandbox != "sb-1" || e.Agent != "" {
		t.Errorf("sandbox.end event: %+v", e)
	}
	if e := evs[2]; e.Kind != "key.create" || e.Agent != agent.ID || e.Sandbox != "" {
		t.Errorf("key.create event (agent looked up): %+v", e)
	}
}

// TestRecordAndRedact: content is digested and cut; a redaction removes it.
func TestRecordAndRedact(t *testing.T) {
	st := openStore(t)
	m, err := New(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	big := strings.Repeat("a", MaxContent+10)
	evs, err := m.Record(t.Context(), []store.MonitorEvent{{Kind: "agent.prompt", Principal: "pr-a", Content: big}})
	if err != nil {
		t.Fatal(err)
	}
	e := evs[0]
	if len(e.Content) != MaxContent || len(e.ContentSHA256) != 64 || !strings.HasPrefix(e.ID, "evt_") || e.Seq == 0 {
		t.Fatalf("recorded: id %s seq %d content %d bytes sha %q", e.ID, e.Seq, len(e.Content), e.ContentSHA256)
	}
	r, err := m.Redact(t.Context(), e.ID)
	if err != nil || r.Content != "" || r.ContentSHA256 != e.ContentSHA256 || r.RedactedAt.IsZero() {
		t.Fatalf("redacted: %+v, %v", r, err)
	}
}
