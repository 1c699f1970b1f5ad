package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestAgents drives hosted agents through one daemon (docs/agents.md):
// a manual run with input through the CLI, a cancel, a cron trigger, the
// signed webhook (good, forged, replayed, stale), a persistent sandbox
// that keeps its files between runs, and last a kill -9 of wardend during
// a run: after the restart the run is failed with a reason, its log kept,
// and the next run works.
func TestAgents(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)

	t.Run("ManualRunWithInput", func(t *testing.T) { testAgentManual(t, d, c) })
	t.Run("Cancel", func(t *testing.T) { testAgentCancel(t, c) })
	t.Run("Cron", func(t *testing.T) { testAgentCron(t, c) })
	t.Run("Webhook", func(t *testing.T) { testAgentWebhook(t, d, c) })
	t.Run("Persistent", func(t *testing.T) { testAgentPersistent(t, c) })
	t.Run("Concurrency", func(t *testing.T) { testAgentConcurrency(t, c) })
	t.Run("Scopes", func(t *testing.T) { testAgentScopes(t, c) })
	t.Run("Slack", func(t *testing.T) { testAgentSlack(t, d, c) })
	t.Run("Enforced", func(t *testing.T) { testAgentEnforced(t, d, c) })
	// Last: it restarts the daemon.
	t.Run("CrashRecovery", func(t *testing.T) { testAgentCrash(t, d, state, run) })
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

func createAgent(t *testing.T, c *warden.Client, spec map[string]any) warden.Agent {
	t.Helper()
	b, _ := json.Marshal(spec)
	a, err := c.CreateAgent(ctxT(t), b)
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	return a
}

// waitRun polls a run until cond holds.
func waitRun(t *testing.T, c *warden.Client, id string, what string, cond func(warden.AgentRun) bool) warden.AgentRun {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := c.GetAgentRun(ctxT(t), id)
		if err == nil && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: not %s: %+v %v", id, what, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runLog(t *testing.T, c *warden.Client, id string) (stdout, all string) {
	t.Helper()
	s, err := c.AgentRunLogs(ctxT(t), id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var o, a strings.Builder
	for {
		l, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Stream == "stdout" {
			o.WriteString(l.Data)
		}
		fmt.Fprintf(&a, "[%s] %s", l.Stream, l.Data)
	}
	return o.String(), a.String()
}

func sandboxEnded(t *testing.T, c *warden.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.GetSandbox(ctxT(t), id)
		var we *warden.Error
		if (errors.As(err, &we) && we.Code == "not_found") || (err == nil && sb.State != "running" && sb.State != "paused" && sb.State != "starting") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run sandbox %s still alive: %+v %v", id, sb, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testAgentManual(t *testing.T, d *daemon, c *warden.Client) {
	dir := t.TempDir()
	yaml := `name: hello
description: says hello with its input
command: ["/bin/sh", "-c", "echo \"input=$WARDEN_RUN_INPUT\"; cat \"$WARDEN_RUN_INPUT_FILE\"; echo; echo \"agent=$WARDEN_AGENT key=${WARDEN_API_KEY:+set}\"; echo to-stderr >&2"]
env: {GREETING: hi}
`
	os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(yaml), 0o644)
	out, errOut, code := d.cli(t, "", "agent", "create", "-f", filepath.Join(dir, "agent.yaml"))
	if code != 0 || !strings.Contains(out, "webhook secret") {
		t.Fatalf("agent create: %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = d.cli(t, "", "agent", "run", "hello", "--input", `{"x":42}`, "--wait")
	if code != 0 {
		t.Fatalf("agent run --wait: %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{`input={"x":42}`, `{"x":42}`, "agent=hello key=set"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "to-stderr") {
		t.Errorf("run stderr lacks the process's stderr:\n%s", errOut)
	}
	runs, err := c.AgentRuns(ctxT(t), "hello", "", 0)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %+v %v", runs, err)
	}
	r := runs[0]
	if r.State != warden.AgentRunSucceeded || r.ExitCode == nil || *r.ExitCode != 0 || r.Version != 1 || r.Trigger != "manual" || r.DurationMS == nil {
		t.Fatalf("run: %+v", r)
	}
	sandboxEnded(t, c, r.SandboxID)
	// The CLI lists it; the logs are kept.
	out, _, code = d.cli(t, "", "agent", "runs", "hello")
	if code != 0 || !strings.Contains(out, r.ID) || !strings.Contains(out, "succeeded") {
		t.Errorf("agent runs: %d\n%s", code, out)
	}
	out, _, code = d.cli(t, "", "agent", "logs", r.ID)
	if code != 0 || !strings.Contains(out, "agent=hello") {
		t.Errorf("agent logs: %d\n%s", code, out)
	}
	// An update makes version 2; a failing command fails the run.
	b, _ := json.Marshal(map[string]any{"name": "hello", "command": []string{"/bin/sh", "-c", "exit 3"}})
	if a, err := c.UpdateAgent(ctxT(t), "hello", b); err != nil || a.Version != 2 {
		t.Fatalf("update: %+v %v", a, err)
	}
	fr, err := c.RunAgent(ctxT(t), "hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	fr = waitRun(t, c, fr.ID, "ended", warden.AgentRun.Ended)
	if fr.State != warden.AgentRunFailed || fr.ExitCode == nil || *fr.ExitCode != 3 || fr.Version != 2 || !strings.Contains(fr.Reason, "exit code 3") {
		t.Fatalf("failing run: %+v", fr)
	}
}

func testAgentCancel(t *testing.T, c *warden.Client) {
	createAgent(t, c, map[string]any{"name": "sleeper", "command": []string{"/bin/sh", "-c", "echo started; exec sleep 600"}})
	r, err := c.RunAgent(ctxT(t), "sleeper", nil)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, c, r.ID, "started", func(r warden.AgentRun) bool { return r.State == "running" && r.SandboxID != "" })
	waitLog(t, c, r.ID, "started")
	got, err := c.CancelAgentRun(ctxT(t), r.ID)
	if err != nil || got.State != warden.AgentRunCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	sandboxEnded(t, c, r.SandboxID)
	if _, err := c.CancelAgentRun(ctxT(t), r.ID); err == nil {
		t.Error("a second cancel of an ended run succeeded")
	}
}

func waitLog(t *testing.T, c *warden.Client, id, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := runLog(t, c, id)
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: log never showed %q: %q", id, want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testAgentCron(t *testing.T, c *warden.Client) {
	createAgent(t, c, map[string]any{"name": "ticker", "command": []string{"/bin/sh", "-c", "echo tick; cat $WARDEN_RUN_INPUT_FILE"},
		"triggers": map[string]any{"cron": []map[string]any{{"schedule": "@every 1s", "overlap": "skip"}}}})
	defer c.DeleteAgent(context.Background(), "ticker")
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs, err := c.AgentRuns(ctxT(t), "ticker", warden.AgentRunSucceeded, 0)
		if err == nil && len(runs) > 0 {
			if runs[0].Trigger != "cron" || !strings.Contains(string(runs[0].Input), "@every 1s") {
				t.Fatalf("cron run: %+v", runs[0])
			}
			out, _ := runLog(t, c, runs[0].ID)
			if !strings.Contains(out, "tick") {
				t.Fatalf("cron run output %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cron run succeeded: %+v %v", runs, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.DeleteAgent(ctxT(t), "ticker"); err != nil {
		t.Fatal(err)
	}
}

func postWebhook(t *testing.T, d *daemon, name, sig, idem string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/agents/"+name+"/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("X-Warden-Signature", sig)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func testAgentWebhook(t *testing.T, d *daemon, c *warden.Client) {
	a := createAgent(t, c, map[string]any{"name": "hooked", "command": []string{"/bin/sh", "-c", "cat $WARDEN_RUN_INPUT_FILE"},
		"triggers": map[string]any{"webhook": true}})
	if a.WebhookSecret == "" {
		t.Fatal("no webhook secret on create")
	}
	body := []byte(`{"event":"push","ref":"main"}`)
	now := time.Now()
	sig := warden.SignAgentWebhook(a.WebhookSecret, now, body)
	code, out := postWebhook(t, d, "hooked", sig, "", body)
	if code != http.StatusAccepted {
		t.Fatalf("signed webhook: %d %v", code, out)
	}
	id, _ := out["run_id"].(string)
	r := waitRun(t, c, id, "ended", warden.AgentRun.Ended)
	if r.State != warden.AgentRunSucceeded || r.Trigger != "webhook" {
		t.Fatalf("webhook run: %+v", r)
	}
	if got, _ := runLog(t, c, id); !strings.Contains(got, `"event":"push"`) {
		t.Fatalf("webhook run did not get its payload: %q", got)
	}
	// The same request again is a replay.
	if code, out := postWebhook(t, d, "hooked", sig, "", body); code != http.StatusConflict {
		t.Errorf("replayed webhook: %d %v", code, out)
	}
	// Forged: another secret, a changed body, no signature, an old or future timestamp.
	forged := []struct {
		name string
		sig  string
		body []byte
	}{
		{"wrong secret", warden.SignAgentWebhook("whsec_guess", now, body), body},
		{"changed body", sig, []byte(`{"event":"push","ref":"evil"}`)},
		{"unsigned", "", body},
		{"stale", warden.SignAgentWebhook(a.WebhookSecret, now.Add(-10*time.Minute), body), body},
		{"future", warden.SignAgentWebhook(a.WebhookSecret, now.Add(10*time.Minute), body), body},
	}
	for _, f := range forged {
		if code, out := postWebhook(t, d, "hooked", f.sig, "", f.body); code != http.StatusUnauthorized {
			t.Errorf("%s webhook: %d %v", f.name, code, out)
		}
	}
	// An unknown agent and one without the trigger answer alike.
	if code, _ := postWebhook(t, d, "nobody", sig, "", body); code != http.StatusUnauthorized {
		t.Errorf("webhook of an unknown agent: %d", code)
	}
	// An idempotency key is honoured across differently timed signatures.
	b2 := []byte(`{"n":2}`)
	if code, out := postWebhook(t, d, "hooked", warden.SignAgentWebhook(a.WebhookSecret, now, b2), "delivery-1", b2); code != http.StatusAccepted {
		t.Fatalf("webhook with an idempotency key: %d %v", code, out)
	}
	if code, _ := postWebhook(t, d, "hooked", warden.SignAgentWebhook(a.WebhookSecret, now.Add(time.Second), b2), "delivery-1", b2); code != http.StatusConflict {
		t.Errorf("redelivery with the same idempotency key: %d", code)
	}
	runs, _ := c.AgentRuns(ctxT(t), "hooked", "", 0)
	if len(runs) != 2 {
		t.Errorf("webhook runs: %d, want 2", len(runs))
	}
	for _, r := range runs {
		waitRun(t, c, r.ID, "ended", warden.AgentRun.Ended)
	}
}

func testAgentPersistent(t *testing.T, c *warden.Client) {
	createAgent(t, c, map[string]any{"name": "keeper", "sandbox": "persistent",
		"command": []string{"/bin/sh", "-c", "echo run >> $HOME/runs.txt; echo count=$(wc -l < $HOME/runs.txt)"}})
	var sandboxID string
	for i := 1; i <= 2; i++ {
		r, err := c.RunAgent(ctxT(t), "keeper", nil)
		if err != nil {
			t.Fatal(err)
		}
		r = waitRun(t, c, r.ID, "ended", warden.AgentRun.Ended)
		if r.State != warden.AgentRunSucceeded {
			_, all := runLog(t, c, r.ID)
			t.Fatalf("persistent run %d: %+v\n%s", i, r, all)
		}
		out, _ := runLog(t, c, r.ID)
		if !strings.Contains(out, fmt.Sprintf("count=%d", i)) {
			t.Fatalf("persistent run %d output %q", i, out)
		}
		if sandboxID == "" {
			sandboxID = r.SandboxID
		} else if r.SandboxID != sandboxID {
			t.Fatalf("persistent run %d in sandbox %s, the first in %s", i, r.SandboxID, sandboxID)
		}
		sb, err := c.GetSandbox(ctxT(t), sandboxID)
		if err != nil || sb.State != "paused" {
			t.Fatalf("persistent sandbox between runs: %+v %v", sb, err)
		}
	}
	if err := c.DeleteAgent(ctxT(t), "keeper"); err != nil {
		t.Fatal(err)
	}
	sandboxEnded(t, c, sandboxID)
}

func testAgentScopes(t *testing.T, c *warden.Client) {
	// A key without agents:write cannot define agents; a user who owns
	// none sees none.
	ctx := ctxT(t)
	p, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "user", Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "bob", Scopes: []string{"agents:read", "agents:run"}})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := warden.New(warden.WithBaseURL(c.BaseURL()), warden.WithAPIKey(k.Key))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"name": "bobs", "command": []string{"true"}})
	var we *warden.Error
	if _, err := bob.CreateAgent(ctx, b); !errors.As(err, &we) || we.Code != "forbidden" {
		t.Errorf("create without agents:write: %v", err)
	}
	if list, err := bob.ListAgents(ctx); err != nil || len(list) != 0 {
		t.Errorf("bob sees agents: %+v %v", list, err)
	}
	if _, err := bob.RunAgent(ctx, "hello", nil); !errors.As(err, &we) || we.Code != "not_found" {
		t.Errorf("bob runs another's agent: %v", err)
	}
}

func testAgentCrash(t *testing.T, d *daemon, state, run string) {
	c := d.client(t, d.adminKey)
	r, err := c.RunAgent(ctxT(t), "sleeper", nil)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, c, r.ID, "started", func(r warden.AgentRun) bool { return r.State == "running" && r.SandboxID != "" })
	waitLog(t, c, r.ID, "started")
	d.stop(syscall.SIGKILL)

	d2 := startDaemon(t, state, run)
	c = d2.client(t, d2.adminKey)
	got, err := c.GetAgentRun(ctxT(t), r.ID)
	if err != nil || got.State != warden.AgentRunFailed || got.Reason != "daemon restarted" || got.EndedAt == nil {
		t.Fatalf("run after kill -9 and restart: %+v %v\n%s", got, err, d2.log)
	}
	out, all := runLog(t, c, r.ID)
	if !strings.Contains(out, "started") || !strings.Contains(all, "daemon restarted") {
		t.Errorf("log after restart: %q", all)
	}
	sandboxEnded(t, c, r.SandboxID)
	// The next trigger works.
	b, _ := json.Marshal(map[string]any{"name": "sleeper", "command": []string{"/bin/sh", "-c", "echo again"}})
	if _, err := c.UpdateAgent(ctxT(t), "sleeper", b); err != nil {
		t.Fatal(err)
	}
	nr, err := c.RunAgent(ctxT(t), "sleeper", nil)
	if err != nil {
		t.Fatal(err)
	}
	nr = waitRun(t, c, nr.ID, "ended", warden.AgentRun.Ended)
	if nr.State != warden.AgentRunSucceeded {
		_, all := runLog(t, c, nr.ID)
		t.Fatalf("run after restart: %+v\n%s", nr, all)
	}
}

// testAgentConcurrency: with concurrency 1 a second run waits queued while
// the first runs, then runs.
func testAgentConcurrency(t *testing.T, c *warden.Client) {
	createAgent(t, c, map[string]any{"name": "serial", "concurrency": 1, "command": []string{"/bin/sh", "-c", "sleep 2; echo done"}})
	first, err := c.RunAgent(ctxT(t), "serial", nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.RunAgent(ctxT(t), "serial", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, first.ID, "running", func(r warden.AgentRun) bool { return r.State == warden.AgentRunRunning })
	if r, err := c.GetAgentRun(ctxT(t), second.ID); err != nil || r.State != warden.AgentRunQueued {
		t.Fatalf("second run while the first runs: %+v %v", r, err)
	}
	f := waitRun(t, c, first.ID, "ended", warden.AgentRun.Ended)
	s := waitRun(t, c, second.ID, "ended", warden.AgentRun.Ended)
	if f.State != warden.AgentRunSucceeded || s.State != warden.AgentRunSucceeded || s.StartedAt == nil || f.EndedAt == nil || s.StartedAt.Before(*f.EndedAt) {
		t.Fatalf("serial runs: first %+v, second %+v", f, s)
	}
	if err := c.DeleteAgent(ctxT(t), "serial"); err != nil {
		t.Fatal(err)
	}
}
