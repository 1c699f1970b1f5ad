package integration

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGVisorVolumes is issue 25's volume checks through the daemon on the
// gVisor backend (TestVolumes runs them on native): data written to a
// volume survives a daemon kill -9 and the sandbox; a writer past the quota
// gets ENOSPC; two sandboxes read one volume read-only and cannot write.
func TestGVisorVolumes(t *testing.T) {
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
	}
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	t.Cleanup(func() {
		if d.cmd == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for _, st := range []warden.SandboxState{"running", "starting", "paused"} {
			for sb, err := range c.AllSandboxes(cctx, warden.ListOptions{State: st}) {
				if err != nil {
					break
				}
				c.KillSandbox(cctx, sb.ID)
			}
		}
		vols, _ := c.ListVolumes(cctx)
		for _, v := range vols {
			if err := c.DeleteVolume(cctx, v.Name); err != nil {
				t.Errorf("cleanup: delete volume %s: %v", v.Name, err)
			}
		}
		if m := volumeMounts(t, state); len(m) > 0 {
			t.Errorf("volume mounts left on the host: %v", m)
		}
	})
	if _, err := c.CreateVolume(ctx, "gdata", 32); err != nil {
		t.Fatal(err)
	}
	a := create(t, c, warden.CreateSandboxRequest{Isolation: "gvisor", TimeoutSeconds: 600,
		Volumes: []warden.VolumeMount{{Name: "gdata", Path: "/data"}}})
	if a.Backend != "gvisor" {
		t.Fatalf("backend = %q, want gvisor", a.Backend)
	}
	if out, code := sh(t, c, a.ID, `echo persisted > /data/a.txt && cat /data/a.txt`); code != 0 || !strings.Contains(out, "persisted") {
		t.Fatalf("write to the volume (exit %d): %s", code, out)
	}
	// The quota is the host filesystem's: ENOSPC in the sandbox.
	out, code := sh(t, c, a.ID, `dd if=/dev/zero of=/data/big bs=1M count=64 2>&1; echo rc=$?; rm -f /data/big`)
	if !strings.Contains(out, "No space left on device") || strings.Contains(out, "rc=0") {
		t.Fatalf("writing 64 MiB into a 32 MiB volume (exit %d): %s", code, out)
	}

	// The daemon dies hard; the sandbox keeps its volume.
	d.stop(syscall.SIGKILL)
	d = startDaemon(t, state, run)
	c = d.client(t, d.adminKey)
	ctx = ctxT(t)
	if out, code := sh(t, c, a.ID, `cat /data/a.txt && echo more >> /data/a.txt`); code != 0 || !strings.Contains(out, "persisted") {
		t.Fatalf("the volume after a daemon kill -9 (exit %d): %s", code, out)
	}
	if err := c.KillSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// The data outlives the sandbox, and is the host's file.
	rc, err := c.ReadVolumeFile(ctx, "gdata", "/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "persisted\nmore\n" {
		t.Fatalf("the volume after its sandbox ended: %q %v", got, err)
	}

	// Read-only by two sandboxes at once; writes refused, as root too.
	var ids []string
	for range 2 {
		sb := create(t, c, warden.CreateSandboxRequest{Isolation: "gvisor", TimeoutSeconds: 600,
			Volumes: []warden.VolumeMount{{Name: "gdata", Path: "/shared", ReadOnly: true}}})
		ids = append(ids, sb.ID)
	}
	for _, id := range ids {
		out, code := sh(t, c, id, `cat /shared/a.txt; touch /shared/x 2>&1; echo rc=$?; sudo touch /shared/y 2>&1; echo rc=$?`)
		if !strings.Contains(out, "persisted") || strings.Contains(out, "rc=0") || !strings.Contains(out, "Read-only file system") {
			t.Fatalf("sandbox %s on a read-only volume (exit %d): %s", id, code, out)
		}
	}
	_, err = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: "gvisor", Volumes: []warden.VolumeMount{{Name: "gdata", Path: "/shared"}}})
	wantStatus(t, "read-write beside read-only mounts", err, 409)
	for _, id := range ids {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if m := volumeMounts(t, state); len(m) != 0 {
		t.Fatalf("volumes still mounted on the host after their sandboxes ended: %v", m)
	}
}
