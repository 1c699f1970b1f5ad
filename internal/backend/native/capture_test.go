package native

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// TestCaptureCopy: a writable layer as a sandbox leaves it (host ids of
// its range, a whiteout, an opaque directory, overlay's private xattrs, a
// symlink, hard links, a set-user-ID file, an id out of range) becomes a
// layer with the ids the sandbox sees, the whiteout and the opaque marker
// kept, the private xattrs dropped, links kept.
func TestCaptureCopy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: chown and whiteouts need root (CI runs as root)")
	}
	const base, size = 400000, 65536
	src, dst := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(rel string) string { return filepath.Join(src, rel) }
	must(os.MkdirAll(p("home/user/work"), 0o755))
	must(os.WriteFile(p("home/user/work/a.txt"), []byte("hello"), 0o644))
	must(os.Link(p("home/user/work/a.txt"), p("home/user/work/hard")))
	must(os.Symlink("work/a.txt", p("home/user/link")))
	must(os.WriteFile(p("suid"), []byte("#!"), 0o755))
	must(os.WriteFile(p("stranger"), []byte("x"), 0o644))
	must(unix.Mknod(p("home/user/gone"), unix.S_IFCHR|0o600, 0))
	must(os.Mkdir(p("opaque"), 0o755))
	must(unix.Lsetxattr(p("opaque"), "user.overlay.opaque", []byte("y"), 0))
	must(unix.Lsetxattr(p("opaque"), "user.overlay.origin", []byte("fh"), 0))
	must(unix.Lsetxattr(p("home/user/work/a.txt"), "user.mine", []byte("kept"), 0))
	for _, rel := range []string{"home", "home/user", "home/user/work", "home/user/work/a.txt", "home/user/link", "home/user/gone"} {
		must(os.Lchown(p(rel), base+1000, base+1000))
	}
	must(os.Lchown(src, base, base))
	must(os.Lchown(p("suid"), base, base))
	must(unix.Chmod(p("suid"), 0o4755))
	must(os.Lchown(p("stranger"), 12, 12))
	must(os.Lchown(p("opaque"), base, base))

	c := idCopier{base: base, size: size, links: map[uint64]string{}}
	must(c.tree(t.Context(), src, dst, true))

	owner := func(rel string, uid int, mode uint32) {
		t.Helper()
		var st unix.Stat_t
		must(unix.Lstat(filepath.Join(dst, rel), &st))
		if int(st.Uid) != uid || int(st.Gid) != uid || (mode != 0 && st.Mode&0o7777 != mode) {
			t.Errorf("%s: owner %d:%d mode %o, want %d:%d %o", rel, st.Uid, st.Gid, st.Mode&0o7777, uid, uid, mode)
		}
	}
	owner(".", 0, 0)
	owner("home/user/work/a.txt", 1000, 0o644)
	owner("home/user/link", 1000, 0)
	owner("suid", 0, 0o4755)
	owner("stranger", nobody, 0o644)
	owner("opaque", 0, 0o755)
	var a, h, g unix.Stat_t
	must(unix.Lstat(filepath.Join(dst, "home/user/work/a.txt"), &a))
	must(unix.Lstat(filepath.Join(dst, "home/user/work/hard"), &h))
	if a.Ino != h.Ino {
		t.Error("the hard link became a copy")
	}
	must(unix.Lstat(filepath.Join(dst, "home/user/gone"), &g))
	if g.Mode&unix.S_IFMT != unix.S_IFCHR || g.Rdev != 0 {
		t.Errorf("the whiteout is mode %o rdev %d", g.Mode, g.Rdev)
	}
	if l, err := os.Readlink(filepath.Join(dst, "home/user/link")); err != nil || l != "work/a.txt" {
		t.Errorf("symlink: %q %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "home/user/work/a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("content: %q %v", b, err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque marker: %q %v", buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "user.overlay.origin", buf); err == nil {
		t.Error("overlay's origin xattr was copied")
	}
	if n, err := unix.Lgetxattr(filepath.Join(dst, "home/user/work/a.txt"), "user.mine", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("the sandbox's own xattr: %q %v", buf[:max(n, 0)], err)
	}
}

// TestUpperTargets: the order nsinit numbers upper directories in.
func TestUpperTargets(t *testing.T) {
	got := upperTargets([]backend.Layer{{Target: "/usr"}, {Target: "/"}, {Target: "/usr"}, {Target: "/opt/"}})
	want := []string{"/", "/usr", "/opt"}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}
