package integration

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestFaults: the agent dies under a running sandbox, and the disk under the
// daemon's state directory fills. Each ends in a clear state in the API,
// resources reclaimed, and the daemon serving.
func TestFaults(t *testing.T) {
	t.Run("AgentKilled", func(t *testing.T) {
		state, run := newDirs(t)
		d := startDaemon(t, state, run)
		c := d.client(t, d.adminKey)
		ctx := ctxT(t)
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// The sandbox's init (the agent) dies: the whole sandbox goes with it.
		syscall.Kill(agentPid(t, run, sb.ID), syscall.SIGKILL)
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, err := c.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == "stopped" {
				if got.EndReason == "" {
					t.Fatal("no end reason")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox still %s after its agent died", got.State)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if left := hostLeftovers(run, sb.ID); len(left) > 0 {
			t.Fatalf("left after the agent died: %v", left)
		}
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsConflict(err) {
			t.Fatalf("exec in the dead sandbox: %v, want 409", err)
		}
		if _, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{}); err != nil {
			t.Fatalf("daemon no longer creates sandboxes: %v", err)
		}
	})
	t.Run("OOMReported", func(t *testing.T) {
		state, run := newDirs(t)
		d := startDaemon(t, state, run)
		c := d.client(t, d.adminKey)
		ctx := ctxT(t)
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{MemoryMB: 64})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", "b = bytearray(300 << 20)"}}, warden.ExecIO{})
		if err != nil || res.Signal != 9 {
			t.Fatalf("memory bomb: %+v %v, want killed by SIGKILL", res, err)
		}
		u, err := c.Usage(ctx, sb.ID)
		if err != nil || u.OOMEvents < 1 {
			t.Fatalf("usage after OOM: %+v %v", u, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			page, err := c.ListAudit(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range page.Events {
				found = found || e.Action == "sandbox.oom"
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no sandbox.oom audit event after an OOM kill")
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The sandbox survives its OOM.
		if res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("sandbox after OOM: %+v %v", res, err)
		}
	})
	t.Run("StateDiskFull", func(t *testing.T) {
		state, run := newDirs(t)
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "warden-it-state", state).CombinedOutput(); err != nil {
			t.Fatalf("mount a small tmpfs for the state dir: %v %s", err, out)
		}
		t.Cleanup(func() { syscall.Unmount(state, syscall.MNT_DETACH) })
		// The tmpfs hides newDirs' link to the shared base template: link
		// it again (a base built in 16 MiB would fill the disk at start).
		if err := os.MkdirAll(filepath.Join(state, "templates"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(sharedBase, filepath.Join(state, "templates", "base")); err != nil {
			t.Fatal(err)
		}
		d := startDaemon(t, state, run)
		c := d.client(t, d.adminKey)
		ctx := ctxT(t)
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// Fill the state filesystem.
		filler := filepath.Join(state, "filler")
		exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M", "count=64").Run()
		var lastErr error
		failed := false
		for i := 0; i < 50 && !failed; i++ {
			_, lastErr = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Metadata: map[string]string{"pad": strings.Repeat("x", 1000)}})
			if lastErr != nil {
				failed = true
			}
		}
		if !failed {
			t.Fatal("creates kept succeeding with the state disk full")
		}
		var we *warden.Error
		if !errors.As(lastErr, &we) || we.Status != 503 || we.Code != "unavailable" {
			t.Fatalf("disk-full create error = %v, want a 5xx JSON error", lastErr)
		}
		resp, err := http.Get(d.url + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("daemon not healthy with a full state disk: %v %v", resp, err)
		}
		resp.Body.Close()
		// The running sandbox keeps working; after space is freed, creates work again.
		if res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); err != nil && !strings.Contains(fmt.Sprint(err), "audit") {
			t.Logf("exec with a full state disk: %+v %v", res, err)
		}
		os.Remove(filler)
		if _, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{}); err != nil {
			t.Fatalf("create after freeing space: %v", err)
		}
		if out, errb, code := d.cli(t, "", "audit", "verify"); code != 0 {
			t.Fatalf("audit after a full disk: %s %s", out, errb)
		}
	})
}
