package native_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/native"
)

// TestDiskWritableLayer: with DiskDir the writable layer (and /tmp) is a
// disk image of the disk limit: writing more than the memory limit into it
// ends with ENOSPC, no OOM kill, and a living sandbox; deleting the sandbox
// leaves no mount, loop device or image.
func TestDiskWritableLayer(t *testing.T) {
	diskDir := filepath.Join(filepath.Dir(runDir), "disks")
	b, err := native.New(native.Config{RunDir: runDir, AgentPath: agentBin, Landlock: testLandlock(), DiskDir: diskDir})
	if err != nil {
		t.Fatal(err)
	}
	if medium, why := b.WritableLayer(); medium != "disk" {
		t.Fatalf("writable layer in %s: %v", medium, why)
	}
	f := backendtest.Factory{New: func(*testing.T) backend.Backend { return b }, Spec: baseSpec}
	s := backendtest.Start(t, f, b, func(sp *backend.Spec) {
		sp.Limits = backend.Limits{MemoryBytes: 96 << 20, DiskBytes: 160 << 20, Pids: 64, CPUMillis: 1000}
	})
	ctx := context.Background()
	if got := s.Sh(t, "", "stat -c %a /tmp"); strings.TrimSpace(got) != "1777" {
		t.Errorf("/tmp mode %s", got)
	}
	// 200 MiB through /tmp and / (more than the 96 MiB of memory, more
	// than the 160 MiB of disk): ENOSPC, not an OOM kill.
	_, errb, res := s.Exec(t, "", "sh", "-c", "dd if=/dev/zero of=/tmp/a bs=1M count=100 && dd if=/dev/zero of=/home/user/b bs=1M count=100 && sync")
	if res.ExitCode == 0 || !strings.Contains(errb, "No space left") {
		t.Errorf("writing 200 MiB into 160 MiB: exit %d, %q", res.ExitCode, errb)
	}
	u, err := b.Usage(ctx, s.H)
	if err != nil {
		t.Fatal(err)
	}
	if u.OOMEvents != 0 {
		t.Errorf("%d OOM events filling the disk", u.OOMEvents)
	}
	if u.DiskBytes < 140<<20 || u.DiskBytes > 160<<20 {
		t.Errorf("disk usage %d MiB after filling a 160 MiB layer", u.DiskBytes>>20)
	}
	if got := s.Sh(t, "", "df -k / | tail -1 | awk '{print $2}'"); strings.TrimSpace(got) == "" {
		t.Errorf("df /: %q", got)
	}
	s.Sh(t, "", "rm -f /tmp/a /home/user/b; echo alive")

	img := filepath.Join(diskDir, s.H.ID+".img")
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("no disk image for the sandbox: %v", err)
	}
	real, _ := filepath.EvalSymlinks(img)
	if err := b.Delete(ctx, s.H); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.H.ID); len(left) > 0 {
		t.Errorf("left after delete: %v", left)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("disk image left after delete: %v", err)
	}
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if raw, err := os.ReadFile(d); err == nil && strings.HasPrefix(strings.TrimSpace(string(raw)), real) {
			t.Errorf("loop device %s still attached to the image", d)
		}
	}
}
