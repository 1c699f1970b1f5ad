package integration

import (
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// waitState polls a sandbox until it is in state want (or fails after 30 s).
func waitState(t *testing.T, c *warden.Client, id string, want warden.SandboxState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.GetSandbox(ctxT(t), id)
		if err == nil && sb.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: state %v (err %v), want %s", id, sb.State, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// auditActions lists the audit actions recorded for target.
func auditActions(t *testing.T, c *warden.Client, target string) []string {
	t.Helper()
	var out []string
	for ev, err := range c.AllAuditEvents(ctxT(t), warden.AuditQuery{Target: target}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Action)
	}
	return out
}

// TestLifetimes, with a real daemon and short settings: a sandbox with an
// idle timeout alone has no countdown, pauses (audited first) once idle,
// and a call wakes it; paused past its retention it is deleted, audited.
func TestLifetimes(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{IdleTimeoutSeconds: 2, PausedRetentionSeconds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.ExpiresAt.IsZero() || sb.IdleTimeoutSeconds != 2 || sb.OnIdle != "pause" || sb.PausedRetentionSeconds != 3 || sb.MaxLifetimeSeconds != 0 {
		t.Fatalf("an idle timeout alone: %+v", sb)
	}
	waitState(t, c, sb.ID, "paused")
	if acts := auditActions(t, c, sb.ID); !strings.Contains(strings.Join(acts, " "), "sandbox.idle_pause") {
		t.Fatalf("no sandbox.idle_pause event: %v", acts)
	}
	// A call wakes it.
	if out, code := sh(t, c, sb.ID, "echo awake"); code != 0 || out != "awake\n" {
		t.Fatalf("exec on an idle-paused sandbox (exit %d): %q", code, out)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("after a call: %+v %v", got, err)
	}
	// Idle again, paused, then deleted past its retention.
	waitState(t, c, sb.ID, "paused")
	waitState(t, c, sb.ID, "stopped")
	acts := strings.Join(auditActions(t, c, sb.ID), " ")
	if !strings.Contains(acts, "sandbox.retention_delete") || !strings.Contains(acts, "sandbox.end") {
		t.Fatalf("retention events: %s", acts)
	}
	if i, j := strings.Index(acts, "sandbox.retention_delete"), strings.LastIndex(acts, "sandbox.end"); i > j {
		t.Fatalf("retention event after the end: %s", acts)
	}
}
