package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestMonitor drives the Agent Monitor through the real daemon: recorded
// Claude Code hook payloads posted by an agent's key appear on its
// timeline (warden monitor --agent), a PreToolUse for a tool a rule denies
// gets Claude Code's deny answer, a sandbox exec appears on that sandbox's
// timeline, and warden monitor -f prints an event reported while it
// follows.
func TestMonitor(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "laptop-claude"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "hooks", Scopes: []string{warden.ScopeMonitorWrite}})
	if err != nil {
		t.Fatal(err)
	}
	hooks := d.client(t, k.Key)
	policy := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(policy, []byte(`id: laptop
scope: {kind: installation}
rules:
  - id: no-rm-rf
    kinds: [agent.tool]
    when: 'agent_tool.name == "Bash" && agent_tool.command.matches("\\brm\\s+-rf\\b")'
    outcome: deny
    message: no recursive deletes
`), 0o600)
	if out, errb, code := d.cli(t, "", "policy", "create", "-f", policy); code != 0 {
		t.Fatalf("policy create: %s%s", out, errb)
	}

	files, _ := filepath.Glob("../../internal/monitor/testdata/claude-code/*.json")
	if len(files) < 10 {
		t.Fatalf("recorded hook payloads: found %d", len(files))
	}
	var kinds []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := hooks.ClaudeCodeHook(ctx, raw)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		var in struct {
			Event string `json:"hook_event_name"`
		}
		json.Unmarshal(raw, &in)
		kinds = append(kinds, map[string]string{"SessionStart": "agent.session_start", "UserPromptSubmit": "agent.prompt",
			"PreToolUse": "agent.tool", "PostToolUse": "agent.tool_result", "Stop": "agent.stop"}[in.Event])
		if strings.Contains(f, "denied") {
			want := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Warden: no recursive deletes (rule no-rm-rf)"}}`
			if string(bytes.TrimSpace(out)) != want {
				t.Fatalf("%s: answer %s, want %s", filepath.Base(f), out, want)
			}
		} else if string(bytes.TrimSpace(out)) != "{}" {
			t.Fatalf("%s: answer %s, want {}", filepath.Base(f), out)
		}
	}
	// The agent's timeline, through the CLI by the agent's name.
	out, errb, code := d.cli(t, "", "monitor", "--agent", "laptop-claude", "--kind", "agent.", "--limit", "100", "--json")
	if code != 0 {
		t.Fatalf("warden monitor: %s%s", out, errb)
	}
	var evs []warden.MonitorEvent
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("warden monitor --json: %v\n%s", err, out)
	}
	if len(evs) != len(kinds) {
		t.Fatalf("timeline has %d hook events, want %d:\n%s", len(evs), len(kinds), out)
	}
	for i, e := range evs {
		if e.Kind != kinds[i] || e.AgentID != agent.ID || e.SessionID != "9f3c2a71-4b8e-4d2a-9c1e-5f6a7b8c9d0e" {
			t.Errorf("event %d: %+v, want kind %s", i, e, kinds[i])
		}
		if strings.HasPrefix(e.Target, "Bash: rm -rf") && (e.Outcome != "denied" || e.RuleID != "no-rm-rf") {
			t.Errorf("the denied tool call: %+v", e)
		}
	}
	// The text form names the denial.
	out, _, _ = d.cli(t, "", "monitor", "--agent", agent.ID, "--kind", "agent.tool")
	if !strings.Contains(out, "denied") || !strings.Contains(out, "Bash: rm -rf build/") || !strings.Contains(out, "[rule no-rm-rf]") {
		t.Errorf("warden monitor text:\n%s", out)
	}

	// A sandbox exec is on that sandbox's timeline (through the audit tap).
	sb, err := admin.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"echo", "on-the-timeline"}}, warden.ExecIO{}); err != nil {
		t.Fatal(err)
	}
	page, err := admin.ListMonitorEvents(ctx, warden.MonitorQuery{Sandbox: sb.ID, Kinds: []string{"exec"}, Since: time.Unix(0, 0), Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].Source != "audit" || page.Events[0].AuditSeq == 0 ||
		!strings.Contains(fmt.Sprint(page.Events[0].Detail), "on-the-timeline") {
		t.Fatalf("the sandbox's exec events: %+v", page.Events)
	}

	// warden monitor -f follows: an event reported after it started is
	// printed as a JSON line.
	cmd := exec.Command(filepath.Join(binDir, "warden"), "monitor", "-f", "--json", "--kind", "deploy")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "WARDEN_URL=" + d.url, "WARDEN_API_KEY=" + d.adminKey, "HOME=" + t.TempDir()}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	time.Sleep(time.Second) // let it reach its long poll
	if _, err := hooks.ReportMonitorEvents(ctx, []warden.ReportedEvent{{Kind: "deploy", Target: "shop-api@v42", Outcome: "success"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-lines:
		var e warden.MonitorEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Kind != "deploy" || e.Target != "shop-api@v42" || e.AgentID != agent.ID {
			t.Fatalf("warden monitor -f printed %q (%v)", line, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("warden monitor -f printed nothing for a new event")
	}
}
