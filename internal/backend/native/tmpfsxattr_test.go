package native

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTmpfsUserXattr: the probe agrees with the kernel's version (tmpfs
// holds user.* attributes from Linux 6.6), and a backend without disk images
// refuses to start on a kernel whose tmpfs cannot hold them.
func TestTmpfsUserXattr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: fsopen of a tmpfs needs root (CI runs as root)")
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("kernel release %q", release)
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	want := major > 6 || major == 6 && minor >= 6
	err := tmpfsUserXattr()
	switch {
	case want && err != nil:
		t.Fatalf("kernel %s: tmpfsUserXattr = %v, want nil", release, err)
	case !want && !errors.Is(err, errTmpfsNoUserXattr):
		t.Fatalf("kernel %s: tmpfsUserXattr = %v, want errTmpfsNoUserXattr", release, err)
	}
	t.Logf("kernel %s: tmpfs user xattrs: %v", release, err)
	if want {
		return
	}
	// Not t.TempDir(): New wants its run directory reachable by others.
	dir, err := os.MkdirTemp("", "warden-xattr-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	_, err = New(Config{RunDir: dir + "/run", AgentPath: "/proc/self/exe"})
	if !errors.Is(err, errTmpfsNoUserXattr) {
		t.Fatalf("New without disk images on kernel %s = %v, want a refusal naming the tmpfs", release, err)
	}
}
