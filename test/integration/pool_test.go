package integration

import (
	"bytes"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestWarmPool: with a pool, a default create claims a pre-started sandbox;
// the caller's environment still reaches its processes, a create with other
// limits boots a new one, and the pool is refilled and cleaned up.
func TestWarmPool(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--pool-size", "2")
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	waitPool := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			dirs, _ := poolDirs(run)
			if len(dirs) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool holds %d sandboxes, want %d", len(dirs), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool(2)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Env: map[string]string{"FROM_CALLER": "yes"}, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	var h warden.Sandbox
	if h, err = c.GetSandbox(ctx, sb.ID); err != nil || h.State != "running" || h.Metadata["k"] != "v" {
		t.Fatalf("claimed sandbox: %+v %v", h, err)
	}
	var out bytes.Buffer
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "echo $FROM_CALLER; hostname"}, warden.ExecIO{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "yes" || lines[1] != sb.ID {
		t.Fatalf("pooled sandbox output %q: want the caller's env and its id %s as hostname", out.String(), sb.ID)
	}
	// A create with other limits does not take from the pool.
	big, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	c.Exec(ctx, big.ID, warden.ExecRequest{Cmd: []string{"hostname"}}, warden.ExecIO{Stdout: &out})
	if strings.TrimSpace(out.String()) != big.ID {
		t.Fatalf("non-default create got hostname %q", out.String())
	}
	// The pool refills; killing the claimed sandbox frees it for good.
	waitPool(2)
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	c.KillSandbox(ctx, big.ID)
	// A graceful stop deletes the unclaimed sandboxes.
	d.stop(15)
	if dirs, _ := poolDirs(run); len(dirs) > 0 {
		t.Fatalf("pooled sandboxes left after shutdown: %v", dirs)
	}
}
