package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/monitor"
	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// monitorServer is a Server like the package's with an Agent Monitor fed
// by a tap on its audit log, and an engine whose rule denies recursive
// deletes by agents that report through hooks.
func monitorServer(t *testing.T) (*httptest.Server, *monitor.Monitor) {
	t.Helper()
	g := govern.New(govern.Config{Store: env.st, Audit: env.alog, Access: govern.CheckedAccess()})
	pol := govern.Policy{ID: "monitor-" + uniq(), Scope: govern.Scope{Kind: govern.ScopeInstallation}, Rules: []govern.Rule{{
		ID: "no-rm-rf", Kinds: []govern.Kind{govern.KindAgentTool}, Outcome: govern.Deny, Message: "no recursive deletes",
		When: `agent_tool.name == "Bash" && agent_tool.command.matches("\\brm\\s+-rf\\b")`,
	}}}
	if _, err := g.CreatePolicy(t.Context(), pol, "test"); err != nil {
		t.Fatal(err)
	}
	ms, ok := env.st.(store.MonitorStore)
	if !ok {
		t.Fatalf("the test store (%T) keeps no timeline", env.st)
	}
	m, err := monitor.New(monitor.Config{Store: ms, Principals: env.st})
	if err != nil {
		t.Fatal(err)
	}
	al, err := govern.NewAuditLog(m.Tap(env.alog), env.st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Govern = g
	cfg.Audit = al
	cfg.Monitor = m
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		g.DeletePolicy(t.Context(), pol.ID)
		g.Close()
		m.Close()
	})
	return hs, m
}

// checkSchema checks a response body against a schema of the spec.
func checkSchema(t *testing.T, schema string, body []byte) {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", schema, err)
	}
	chk := schemaChecker{doc: loadSpec(t)}
	for _, e := range chk.check(schema, map[string]any{"$ref": "#/components/schemas/" + schema}, v) {
		t.Errorf("response is not a %s: %s", schema, e)
	}
}

func monitorPage(t *testing.T, hs *httptest.Server, key, query string) (warden.MonitorPage, int) {
	t.Helper()
	r := call(t, hs, key, "GET", "/v1/monitor/events?"+query, "", nil, nil)
	var p warden.MonitorPage
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("list: %v: %s", err, r.body)
		}
		checkSchema(t, "MonitorList", r.body)
	}
	return p, r.status
}

func TestMonitorAPI(t *testing.T) {
	hs, _ := monitorServer(t)
	ctx := t.Context()
	// The agent reports with monitor:write; a reader has monitor:read.
	writer, _, err := env.auth.IssueKey(ctx, env.aID, "monitor-w-"+uniq(), []auth.Scope{auth.ScopeMonitorWrite})
	if err != nil {
		t.Fatal(err)
	}
	reader, _, err := env.auth.IssueKey(ctx, env.bID, "monitor-r-"+uniq(), []auth.Scope{auth.ScopeMonitorRead})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ClaudeCodeHooks", func(t *testing.T) {
		files, _ := filepath.Glob("../monitor/testdata/claude-code/*.json")
		if len(files) < 10 {
			t.Fatalf("recorded payloads: found %d", len(files))
		}
		session := "9f3c2a71-4b8e-4d2a-9c1e-5f6a7b8c9d0e-" + uniq()
		var kinds []string
		var deniedReq string
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			raw = bytes.ReplaceAll(raw, []byte("9f3c2a71-4b8e-4d2a-9c1e-5f6a7b8c9d0e"), []byte(session))
			r := call(t, hs, writer, "POST", "/v1/monitor/hooks/claude-code", "application/json", raw, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s: status %d: %s", f, r.status, r.body)
			}
			var out monitor.ClaudeCodeOutput
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
			denied := strings.Contains(f, "denied")
			if denied {
				deniedReq = r.reqID
				checkSchema(t, "ClaudeCodeHookOutput", r.body)
				h := out.HookSpecificOutput
				if h == nil || h.PermissionDecision != "deny" || h.HookEventName != "PreToolUse" ||
					h.PermissionDecisionReason != "Warden: no recursive deletes (rule no-rm-rf)" {
					t.Fatalf("%s: answer %s, want a deny naming the rule", f, r.body)
				}
			} else if strings.TrimSpace(string(r.body)) != "{}" {
				t.Fatalf("%s: answer %s, want {}", f, r.body)
			}
			var in monitor.ClaudeCodeInput
			json.Unmarshal(raw, &in)
			kinds = append(kinds, in.Kind())
		}
		p, st := monitorPage(t, hs, reader, "session="+session+"&limit=1000")
		if st != http.StatusOK || len(p.Events) != len(files) {
			t.Fatalf("timeline of the session: status %d, %d events, want %d", st, len(p.Events), len(files))
		}
		for i, e := range p.Events {
			if e.Kind != kinds[i] || e.PrincipalID != env.aID || e.AgentID != env.aID || e.Source != "hook" {
				t.Errorf("event %d: %+v, want kind %s by agent %s", i, e, kinds[i], env.aID)
			}
			if e.Kind == "agent.tool" && strings.HasPrefix(e.Target, "Bash: rm -rf") {
				if e.Outcome != "denied" || e.RuleID != "no-rm-rf" {
					t.Errorf("denied tool event: %+v", e)
				}
			}
			if e.Kind == "agent.prompt" && !strings.Contains(e.Content, "checkout tests fail") {
				t.Errorf("prompt content: %q", e.Content)
			}
		}
		// The denial is audited, decided as agent.tool on the hook surface,
		// without the tool's input.
		evs := eventsOf(t, deniedReq)
		if len(evs) != 1 || evs[0].Action != "monitor.hook" || evs[0].Outcome != govern.AuditDenied {
			t.Fatalf("audit of the denied hook: %+v", evs)
		}
		rec := decisionOf(t, evs[0])
		if rec.Action.Kind != govern.KindAgentTool || rec.Action.Surface != govern.SurfaceHook || rec.Action.AgentTool == nil ||
			rec.Action.AgentTool.Command != "rm -rf build/ node_modules/.cache" || rec.Action.AgentTool.Input != nil ||
			rec.Decision.RuleID != "no-rm-rf" {
			t.Fatalf("audit record: %+v %+v", rec.Action, rec.Decision)
		}
		// kind filter by prefix, agent filter.
		p, _ = monitorPage(t, hs, reader, "session="+session+"&kind=agent.tool_result,agent.stop")
		if len(p.Events) != 3 {
			t.Errorf("kind filter: %d events, want 3", len(p.Events))
		}
		p, _ = monitorPage(t, hs, reader, "session="+session+"&agent="+env.bID)
		if len(p.Events) != 0 {
			t.Errorf("agent filter: %d events of another agent", len(p.Events))
		}
		// Bad hook input.
		if r := call(t, hs, writer, "POST", "/v1/monitor/hooks/claude-code", "application/json", []byte(`{"session_id":"x"}`), nil); r.status != http.StatusBadRequest {
			t.Errorf("hook input without hook_event_name: %d", r.status)
		}
	})

	t.Run("Ingest", func(t *testing.T) {
		sess := "ingest-" + uniq()
		body := fmt.Sprintf(`{"events":[{"kind":"tool_call","session":%q,"target":"search","outcome":"success","detail":{"q":"x"}},
			{"kind":"agent.prompt","session":%q,"content":"hello"}]}`, sess, sess)
		r := call(t, hs, writer, "POST", "/v1/monitor/events", "application/json", []byte(body), nil)
		if r.status != http.StatusOK {
			t.Fatalf("ingest: %d %s", r.status, r.body)
		}
		checkSchema(t, "MonitorIngestResult", r.body)
		var res warden.IngestResult
		json.Unmarshal(r.body, &res)
		if res.Accepted != 2 || len(res.IDs) != 2 || res.LastSeq == 0 {
			t.Fatalf("ingest result: %s", r.body)
		}
		p, _ := monitorPage(t, hs, reader, "session="+sess)
		if len(p.Events) != 2 || p.Events[0].Kind != "tool_call" || p.Events[0].Detail["q"] != "x" ||
			p.Events[1].Content != "hello" || p.Events[1].ContentSHA256 == "" || p.NextCursor != res.LastSeq {
			t.Fatalf("ingested events: %+v", p)
		}
		for _, c := range []struct {
			key, body string
			status    int
		}{
			{writer, `{"events":[{"kind":"Not A Kind"}]}`, http.StatusUnprocessableEntity},
			{writer, `{"events":[]}`, http.StatusUnprocessableEntity},
			{writer, `{"events":[{"kind":"x","principal":"someone-else"}]}`, http.StatusBadRequest},
			{reader, `{"events":[{"kind":"x"}]}`, http.StatusForbidden},
		} {
			if r := call(t, hs, c.key, "POST", "/v1/monitor/events", "application/json", []byte(c.body), nil); r.status != c.status {
				t.Errorf("ingest %s: %d, want %d: %s", c.body, r.status, c.status, r.body)
			}
		}
		if _, st := monitorPage(t, hs, writer, ""); st != http.StatusForbidden {
			t.Errorf("list with monitor:write only: %d, want 403", st)
		}
		// Redaction: admin only, content gone, audited.
		id := p.Events[1].ID
		if r := call(t, hs, reader, "POST", "/v1/monitor/events/"+id+"/redact", "", nil, nil); r.status != http.StatusForbidden {
			t.Errorf("redact with monitor:read: %d", r.status)
		}
		r = call(t, hs, env.adminKey, "POST", "/v1/monitor/events/"+id+"/redact", "", nil, nil)
		checkSchema(t, "MonitorEvent", r.body)
		var red warden.MonitorEvent
		json.Unmarshal(r.body, &red)
		if r.status != http.StatusOK || red.Content != "" || red.RedactedAt == nil || red.ContentSHA256 != p.Events[1].ContentSHA256 {
			t.Fatalf("redact: %d %s", r.status, r.body)
		}
		if evs := eventsOf(t, r.reqID); len(evs) != 1 || evs[0].Action != "monitor.redact" || evs[0].Target != id {
			t.Fatalf("redaction audit: %+v", evs)
		}
		if r := call(t, hs, reader, "GET", "/v1/monitor/events/"+id, "", nil, nil); r.status != http.StatusOK || strings.Contains(string(r.body), "hello") {
			t.Fatalf("get after redaction: %d %s", r.status, r.body)
		}
		if r := call(t, hs, reader, "GET", "/v1/monitor/events/evt_nope", "", nil, nil); r.status != http.StatusNotFound {
			t.Errorf("get missing: %d", r.status)
		}
	})

	t.Run("LongPoll", func(t *testing.T) {
		sess := "poll-" + uniq()
		p, _ := monitorPage(t, hs, reader, "session="+sess)
		got := make(chan warden.MonitorPage, 1)
		go func() {
			p, _ := monitorPage(t, hs, reader, fmt.Sprintf("session=%s&since=%s&wait=30", sess, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)))
			got <- p
		}()
		time.Sleep(200 * time.Millisecond)
		call(t, hs, writer, "POST", "/v1/monitor/events", "application/json", []byte(`{"events":[{"kind":"late","session":"`+sess+`"}]}`), nil)
		select {
		case p = <-got:
			if len(p.Events) != 1 || p.Events[0].Kind != "late" {
				t.Fatalf("long poll answered %+v", p)
			}
		case <-time.After(25 * time.Second):
			t.Fatal("long poll did not answer when an event arrived")
		}
	})

	t.Run("SandboxExec", func(t *testing.T) {
		r := call(t, hs, env.aKey, "POST", "/v1/sandboxes/"+env.sbA+"/exec", "application/json", []byte(`{"cmd":["echo","monitored"]}`), nil)
		if r.status != http.StatusOK && r.status != http.StatusCreated {
			t.Fatalf("exec: %d %s", r.status, r.body)
		}
		// The tap writes asynchronously: wait for it.
		deadline := time.Now().Add(20 * time.Second)
		for {
			p, _ := monitorPage(t, hs, reader, "sandbox="+env.sbA+"&kind=exec&limit=1000&wait=2")
			for _, e := range p.Events {
				if e.Source == "audit" && e.AuditSeq > 0 && e.PrincipalID == env.aID && strings.Contains(fmt.Sprint(e.Detail), "monitored") {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the exec is not on the sandbox's timeline: %+v", p.Events)
			}
		}
	})
}

// TestMonitorSpecSDKTypes: the SDK's monitor types have exactly the
// spec's properties.
func TestMonitorSpecSDKTypes(t *testing.T) {
	schemas := obj(obj(loadSpec(t)["components"])["schemas"])
	for name, typ := range map[string]any{"MonitorEvent": warden.MonitorEvent{}, "MonitorList": warden.MonitorPage{},
		"ReportedEvent": warden.ReportedEvent{}, "MonitorIngestResult": warden.IngestResult{}} {
		props := map[string]bool{}
		for k := range obj(obj(schemas[name])["properties"]) {
			props[k] = true
		}
		fields := jsonNames(reflect.TypeOf(typ))
		for f := range fields {
			if !props[f] {
				t.Errorf("%T: field %q is not a property of schema %s", typ, f, name)
			}
		}
		for p := range props {
			if !fields[p] {
				t.Errorf("%T: schema %s property %q has no field", typ, name, p)
			}
		}
	}
}
