package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// sh runs a shell line in a sandbox and returns its output and exit code.
func sh(t *testing.T, c *warden.Client, id, line string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	res, err := c.Exec(ctxT(t), id, warden.ExecRequest{Command: line}, warden.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", line, id, err)
	}
	return out.String(), res.ExitCode
}

func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var we *warden.Error
	if !errors.As(err, &we) || we.Status != status {
		t.Fatalf("%s: %v, want HTTP %d", what, err, status)
	}
}

// volumeMounts lists the host mounts of the daemon's volumes.
func volumeMounts(t *testing.T, state string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(state, "volumes")+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// TestVolumes, on the native backend with one daemon (killed -9 and
// restarted once): a volume mounted read-write keeps its data across the
// sandbox's end and the daemon's restart; a writer past the quota gets
// ENOSPC in the sandbox; many sandboxes mount one volume read-only and
// cannot write; exclusivity and delete-while-mounted answer 409; copies in
// and out refuse traversal and planted symlinks; nothing stays mounted on
// the host once nothing uses a volume.
func TestVolumes(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	if _, err := c.CreateVolume(ctx, "data", 32); err != nil {
		var we *warden.Error
		if errors.As(err, &we) && we.Status == 503 {
			t.Fatalf("VOLUMES UNAVAILABLE on this host (loop devices, ext4, e2fsprogs): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Before the daemon's own cleanup: end the sandboxes, then delete
		// the volumes, so nothing stays mounted under the state dir.
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
	if _, err := c.CreateVolume(ctx, "shared", 16); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, "data", 16); err == nil {
		t.Fatal("a second volume named data was created")
	} else {
		wantStatus(t, "duplicate name", err, 409)
	}
	if m := volumeMounts(t, state); len(m) != 0 {
		t.Fatalf("unused volumes mounted on the host: %v", m)
	}

	a, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Volumes: []warden.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, code := sh(t, c, a.ID, `echo persisted > /data/a.txt && cat /data/a.txt && grep ' /data ' /proc/self/mountinfo`)
	if code != 0 || !strings.Contains(out, "persisted") || !strings.Contains(out, "nosuid") || !strings.Contains(out, "nodev") {
		t.Fatalf("write to the volume (exit %d): %s", code, out)
	}

	t.Run("Quota", func(t *testing.T) {
		out, code := sh(t, c, a.ID, `dd if=/dev/zero of=/data/big bs=1M count=64 2>&1; echo rc=$?; rm -f /data/big`)
		if !strings.Contains(out, "No space left on device") || strings.Contains(out, "rc=0") {
			t.Fatalf("writing 64 MiB into a 32 MiB volume (exit %d): %s", code, out)
		}
		img, err := filepath.Glob(filepath.Join(state, "volumes", "images", "*.img"))
		if err != nil || len(img) != 2 {
			t.Fatalf("images: %v %v", img, err)
		}
		for _, p := range img {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Blocks*512 > 33<<20 {
				t.Fatalf("image %s holds %d bytes on the host (err %v)", p, st.Blocks*512, err)
			}
		}
		if _, err := c.GetVolume(ctx, "data"); err != nil {
			t.Fatalf("the daemon after the full volume: %v", err)
		}
	})

	t.Run("Exclusive", func(t *testing.T) {
		_, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "data", Path: "/data", ReadOnly: true}}})
		wantStatus(t, "mounting a volume another sandbox has read-write", err, 409)
		wantStatus(t, "delete while mounted", c.DeleteVolume(ctx, "data"), 409)
		_, err = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "nope", Path: "/x"}}})
		wantStatus(t, "an unknown volume", err, 404)
		_, err = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "shared", Path: "/proc/x"}}})
		wantStatus(t, "a volume under /proc", err, 422)
	})

	t.Run("ReadOnlyByMany", func(t *testing.T) {
		if _, err := c.WriteVolumeFile(ctx, "shared", "/docs/readme.txt", strings.NewReader("shared words"), 0); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 2 {
			sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "shared", Path: "/shared", ReadOnly: true}}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sb.ID)
		}
		for _, id := range ids {
			out, code := sh(t, c, id, `cat /shared/docs/readme.txt; echo; touch /shared/x 2>&1; echo rc=$?; sudo touch /shared/y 2>&1; echo rc=$?`)
			if !strings.Contains(out, "shared words") || strings.Contains(out, "rc=0") || !strings.Contains(out, "Read-only file system") {
				t.Fatalf("sandbox %s on a read-only volume (exit %d): %s", id, code, out)
			}
		}
		_, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "shared", Path: "/shared"}}})
		wantStatus(t, "read-write beside read-only mounts", err, 409)
		info, err := c.GetVolume(ctx, "shared")
		if err != nil || len(info.Attachments) != 2 || info.UsedBytes <= 0 {
			t.Fatalf("inspect: %+v %v", info, err)
		}
		for _, id := range ids {
			if err := c.KillSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("CopyPaths", func(t *testing.T) {
		// A symlink the sandbox planted, and traversal, never reach the host.
		if out, code := sh(t, c, a.ID, `ln -s /etc/passwd /data/evil && ln -s / /data/root && mkdir -p /data/in && echo in > /data/in/f`); code != 0 {
			t.Fatalf("plant symlinks: %s", out)
		}
		for _, p := range []string{"/evil", "/root/etc/passwd", "/../../../etc/passwd", "/in/../../x"} {
			if rc, err := c.ReadVolumeFile(ctx, "data", p); err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				t.Errorf("read %s: got %d bytes, want a refusal", p, len(b))
			}
			if _, err := c.WriteVolumeFile(ctx, "data", p, strings.NewReader("x"), 0); err == nil {
				t.Errorf("write %s: no refusal", p)
			}
		}
		rc, err := c.ReadVolumeFile(ctx, "data", "/in/f")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "in\n" {
			t.Fatalf("read /in/f: %q", b)
		}
		if host, _ := os.ReadFile("/etc/passwd"); !bytes.Contains(host, []byte("root:")) {
			t.Fatal("host /etc/passwd changed")
		}
	})

	// The daemon dies hard; the sandbox keeps its volume, and the data
	// survives the sandbox too.
	d.stop(syscall.SIGKILL)
	d = startDaemon(t, state, run)
	c = d.client(t, d.adminKey)
	ctx = ctxT(t)
	if out, code := sh(t, c, a.ID, `cat /data/a.txt && echo more >> /data/a.txt`); code != 0 || !strings.Contains(out, "persisted") {
		t.Fatalf("the volume after a daemon restart (exit %d): %s", code, out)
	}
	if err := c.KillSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// Nothing mounts the volume: it is unmounted on the host.
	if m := volumeMounts(t, state); len(m) != 0 {
		t.Fatalf("volumes still mounted on the host after their sandboxes ended: %v", m)
	}
	b, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Volumes: []warden.VolumeMount{{Name: "data", Path: "/home/user/work"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, c, b.ID, `cat /home/user/work/a.txt && stat -c %U /home/user/work/a.txt`); code != 0 || out != "persisted\nmore\nuser\n" {
		t.Fatalf("the volume in a new sandbox (exit %d): %q", code, out)
	}
	// Grow it while unmounted, then the data is still there.
	if err := c.KillSandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	v, err := c.ResizeVolume(ctx, "data", 64)
	if err != nil || v.SizeBytes != 64<<20 {
		t.Fatalf("resize: %+v %v", v, err)
	}
	rc, err := c.ReadVolumeFile(ctx, "data", "/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "persisted\nmore\n" {
		t.Fatalf("after resize: %q", got)
	}
	if err := c.DeleteVolume(ctx, "data"); err != nil {
		t.Fatalf("delete once unmounted: %v", err)
	}
	if img, _ := filepath.Glob(filepath.Join(state, "volumes", "images", "*.img")); len(img) != 1 {
		t.Fatalf("images after deleting one of two: %v", img)
	}
	if err := c.DeleteVolume(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if m := volumeMounts(t, state); len(m) != 0 {
		t.Fatalf("volume mounts left on the host: %v", m)
	}
}
