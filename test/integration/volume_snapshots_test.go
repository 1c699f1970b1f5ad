package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestVolumeSnapshots, on the native backend: a snapshot taken while a
// sandbox writes to the volume (frozen for the copy) holds what it wrote;
// a restore is refused while the sandbox lives; once it has ended the
// restore brings the old files back, and a new sandbox sees them; a volume
// made from the snapshot holds them too; deleting the volume deletes its
// snapshots' images. And a sandbox snapshot (pre-copy) of a sandbox that
// keeps writing is one moment of its files.
func TestVolumeSnapshots(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	if _, err := c.CreateVolume(ctx, "snapdata", 16); err != nil {
		t.Fatalf("create volume (volumes need loop devices, ext4, e2fsprogs): %v", err)
	}
	t.Cleanup(func() {
		if d.cmd == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for sb, err := range c.AllSandboxes(cctx, warden.ListOptions{State: "running"}) {
			if err != nil {
				break
			}
			c.KillSandbox(cctx, sb.ID)
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
	mount := []warden.VolumeMount{{Name: "snapdata", Path: "/data"}}
	a, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Volumes: mount})
	if err != nil {
		t.Fatal(err)
	}
	// Written by the sandbox, not synced: the freeze flushes it.
	if out, code := sh(t, c, a.ID, `echo old > /data/f && mkdir -p /data/d && echo kept > /data/d/g`); code != 0 {
		t.Fatalf("write (exit %d): %s", code, out)
	}
	sn, err := c.SnapshotVolume(ctx, "snapdata", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if sn.StoredBytes <= 0 || sn.StoredBytes >= sn.SizeBytes {
		t.Errorf("snapshot %+v: want a sparse copy", sn)
	}
	// The sandbox writes on after the snapshot (thawed).
	if out, code := sh(t, c, a.ID, `echo new > /data/f && rm -r /data/d && echo later > /data/h && cat /data/f`); code != 0 || strings.TrimSpace(out) != "new" {
		t.Fatalf("write after the snapshot (exit %d): %s", code, out)
	}
	_, err = c.RestoreVolume(ctx, "snapdata", "v1")
	wantStatus(t, "restore while mounted", err, 409)
	if err := c.KillSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RestoreVolume(ctx, "snapdata", "v1"); err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Volumes: mount})
	if err != nil {
		t.Fatal(err)
	}
	out, code := sh(t, c, b.ID, `cat /data/f /data/d/g; test -e /data/h && echo h-exists; true`)
	if code != 0 || out != "old\nkept\n" {
		t.Fatalf("a new sandbox after the restore sees %q (exit %d), want old and kept", out, code)
	}
	// A sandbox snapshot (pre-copy, then frozen) of a sandbox that keeps
	// writing is one moment of its files: the pair a, b written in that
	// order is seen equal or a one ahead, never anything else.
	if out, code := sh(t, c, b.ID, `cd /home/user && setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > a.t; mv a.t a; echo $i > b.t; mv b.t b; sleep 0.01; done' >/dev/null 2>&1 < /dev/null & sleep 1; cat /home/user/b`); code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("writer (exit %d): %s", code, out)
	}
	fsn, err := c.CreateSnapshot(ctx, b.ID, "writer")
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, c, b.ID, `cat /home/user/b`); strings.TrimSpace(out) == "" {
		t.Fatal("the writer stopped with the snapshot")
	}
	c.KillSandbox(ctx, b.ID)
	fb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Snapshot: fsn.Name})
	if err != nil {
		t.Fatal(err)
	}
	out, code = sh(t, c, fb.ID, `a=$(cat /home/user/a); b=$(cat /home/user/b); echo $a $b; [ "$a" = "$b" ] || [ "$a" = "$((b+1))" ]`)
	if code != 0 {
		t.Fatalf("snapshot of a writing sandbox holds a, b = %s: not one moment", out)
	}
	c.KillSandbox(ctx, fb.ID)
	c.DeleteSnapshot(ctx, fsn.Name)

	if _, err := c.CreateVolumeFromSnapshot(ctx, "snapcopy", "snapdata", "v1"); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadVolumeFile(ctx, "snapcopy", "/d/g")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _ := rc.Read(buf)
	rc.Close()
	if string(buf[:n]) != "kept\n" {
		t.Fatalf("volume from the snapshot holds %q", buf[:n])
	}
	if err := c.DeleteVolume(ctx, "snapdata"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "volumes", "snapshots")); len(ents) != 0 {
		t.Fatalf("snapshot images left after the volume's delete: %v", ents)
	}
}
