package backendtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
)

// testVolumes: a backend without Capabilities.Volumes refuses a spec with
// volumes; one with it binds each host directory at its target, nosuid
// and nodev, read-only when asked, with the files' ids as the sandbox sees
// them (uid 1000 on the host's disk is the sandbox's user), a missing
// target directory made.
func testVolumes(t *testing.T, f Factory, b backend.Backend) {
	ctx := context.Background()
	if !b.Capabilities().Volumes {
		spec := f.Spec(t, newID("vol"))
		spec.Volumes = []backend.VolumeMount{{Source: t.TempDir(), Target: "/data"}}
		h, err := b.Create(ctx, spec)
		if err == nil {
			b.Delete(ctx, h)
			t.Fatalf("backend %s without the volumes capability created a sandbox with volumes", b.ID())
		}
		if !errors.Is(err, backend.ErrUnsupported) && !errors.Is(err, backend.ErrInvalidSpec) {
			t.Fatalf("refusal of volumes: %v, want ErrUnsupported or ErrInvalidSpec", err)
		}
		return
	}
	// Volumes are mounted filesystems on the host: ext4 images, as in
	// wardend (a tmpfs will not do: Debian 12's kernel cannot idmap one).
	pool, err := diskimg.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	mk := func() string {
		d := t.TempDir()
		n++
		id := fmt.Sprintf("bt-vol-%d", n)
		if err := pool.Mount(id, 16<<20, d, 1000); err != nil {
			t.Fatalf("mount an ext4 volume: %v", err)
		}
		t.Cleanup(func() { pool.Remove(id, d) })
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	rw, ro := mk(), mk()
	if err := os.WriteFile(filepath.Join(ro, "given"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(ro, "given"), 1000, 1000)
	s := Start(t, f, b, func(sp *backend.Spec) {
		sp.Volumes = []backend.VolumeMount{{Source: rw, Target: "/data"}, {Source: ro, Target: "/mnt/deep/ro", ReadOnly: true}}
	})
	s.Sh(t, "user", `set -e
echo written > /data/w
test "$(cat /mnt/deep/ro/given)" = "from the host"
test "$(stat -c %u /mnt/deep/ro/given)" = 1000`)
	// As the volume root's owner, so that only the read-only mount can
	// refuse (gVisor checks permissions before the mount's flag: root
	// without CAP_DAC_OVERRIDE gets EACCES there, EROFS on Linux).
	if out, _, res := s.Exec(t, "user", "/bin/sh", "-c", "touch /mnt/deep/ro/x 2>&1"); res.ExitCode == 0 || !strings.Contains(out, "Read-only") {
		t.Errorf("write to a read-only volume as its owner: exit %d: %s", res.ExitCode, out)
	}
	if out, _, res := s.Exec(t, "root", "/bin/sh", "-c", "touch /mnt/deep/ro/x 2>&1"); res.ExitCode == 0 {
		t.Errorf("write to a read-only volume as root: exit %d: %s", res.ExitCode, out)
	}
	mi := s.Sh(t, "user", `grep -E ' /data | /mnt/deep/ro ' /proc/self/mountinfo`)
	for _, l := range strings.Split(strings.TrimSpace(mi), "\n") {
		if !strings.Contains(l, "nosuid") || !strings.Contains(l, "nodev") {
			t.Errorf("volume mount without nosuid,nodev: %s", l)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(rw, "w"), &st); err != nil || st.Uid != 1000 {
		t.Errorf("file written by the sandbox user: uid %d on the host, want 1000 (err %v)", st.Uid, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); err == nil {
		t.Error("a read-only volume was written")
	}
	// A source that is not a mounted filesystem (a volume's bare mount
	// point) is refused: the sandbox would write to the host's disk.
	spec := f.Spec(t, newID("vol"))
	spec.Volumes = []backend.VolumeMount{{Source: t.TempDir(), Target: "/data"}}
	h, err := b.Create(ctx, spec)
	if err == nil {
		defer b.Delete(ctx, h)
		if _, err = b.Start(ctx, h); err == nil {
			t.Error("a sandbox started with an unmounted volume source")
		}
	}
}
