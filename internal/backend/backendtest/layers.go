package backendtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// testOverlay checks the writable layer's overlay semantics from inside: a
// directory of the template removed and made again must come back empty
// (an opaque directory), and a removed template file stays removed.
func testOverlay(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	out := s.Sh(t, "root", `set -e
test -n "$(ls -A /etc/skel 2>/dev/null || ls -A /etc)"
rm -rf /etc/skel && mkdir /etc/skel && touch /etc/skel/only
ls -A /etc/skel
rm /etc/os-release
test ! -e /etc/os-release && echo gone`)
	if out != "only\ngone\n" {
		t.Fatalf("overlay semantics: got %q, want the recreated dir to hold only the new file", out)
	}
}

// testCaptureUpper runs a sandbox whose writable layers go to host
// directories (template builds) and checks what lands there: new files with
// in-sandbox owners, a whiteout for a removed file and an opaque marker for
// a replaced directory, in overlayfs's user-namespace form.
func testCaptureUpper(t *testing.T, f Factory, b backend.Backend) {
	if !b.Capabilities().CaptureUpper {
		t.Skipf("backend %s does not declare CaptureUpper", b.ID())
	}
	dir := t.TempDir()
	uppers := map[string]string{}
	for i, l := range f.Spec(t, "probe").Layers {
		if _, ok := uppers[l.Target]; ok {
			continue
		}
		p := filepath.Join(dir, "t"+string(rune('0'+i)))
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		uppers[l.Target] = p
	}
	s := Start(t, f, b, func(sp *backend.Spec) {
		sp.Uppers = uppers
		sp.RootCaps = []string{"CAP_CHOWN", "CAP_FOWNER", "CAP_FSETID"}
	})
	// RootCaps: root holds exactly chown, fowner and fsetid (bits 0, 3, 4);
	// another user holds nothing.
	if got := s.Sh(t, "root", `grep CapEff /proc/self/status`); !strings.HasSuffix(strings.TrimSpace(got), "0000000000000019") {
		t.Errorf("root with RootCaps: %s, want CapEff 0000000000000019", got)
	}
	if got := s.Sh(t, "user", `grep CapEff /proc/self/status`); !strings.HasSuffix(strings.TrimSpace(got), "0000000000000000") {
		t.Errorf("user with RootCaps: %s, want no capabilities", got)
	}
	s.Sh(t, "root", `set -e
mkdir -p /data
echo hi > /data/f
chown 1000:1000 /data/f
chmod 4750 /data/f
rm /etc/os-release
rm -rf /etc/skel && mkdir /etc/skel && touch /etc/skel/only`)
	if err := b.Stop(context.Background(), s.H, 0); err != nil {
		t.Fatalf("stop: %v", err)
	}
	up := filepath.Join(uppers["/"], "upper")
	st, err := os.Lstat(filepath.Join(up, "data", "f"))
	if err != nil {
		t.Fatalf("captured file: %v", err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 1000 || sys.Gid != 1000 {
		t.Errorf("captured file owned by %d:%d on disk, want the in-sandbox 1000:1000", sys.Uid, sys.Gid)
	}
	if st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o750 {
		t.Errorf("captured file mode %v, want setuid 0750", st.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(up, "data", "f")); string(b) != "hi\n" {
		t.Errorf("captured file holds %q", b)
	}
	wh, err := os.Lstat(filepath.Join(up, "etc", "os-release"))
	if err != nil {
		t.Fatalf("whiteout: %v", err)
	}
	if wsys := wh.Sys().(*syscall.Stat_t); wh.Mode()&os.ModeCharDevice == 0 || wsys.Rdev != 0 {
		t.Errorf("removed file left %v (rdev %d), want a 0/0 character device whiteout", wh.Mode(), wsys.Rdev)
	}
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(up, "etc", "skel"), "user.overlay.opaque", buf)
	if err != nil || strings.TrimSpace(string(buf[:n])) != "y" {
		t.Errorf("replaced directory: user.overlay.opaque = %q, %v; want \"y\"", buf[:max(n, 0)], err)
	}
	if _, err := os.Lstat(filepath.Join(up, "etc", "skel", "only")); err != nil {
		t.Errorf("new file in replaced directory: %v", err)
	}
}
