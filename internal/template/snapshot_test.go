package template

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// plantHost points the builder at a fake host /usr, /usr/local, dpkg
// database and /etc below dir, and returns a function that "upgrades" a file
// and the package database the way dpkg does: write name.dpkg-new, rename.
func plantHost(t *testing.T, dir string) (usr string, upgrade func(file, content, pkgVersion string)) {
	t.Helper()
	usr = filepath.Join(dir, "usr")
	dpkg := filepath.Join(dir, "dpkg")
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib/pkg", "usr/local/bin", "dpkg/info", "dpkg/updates",
		"etc/apt/sources.list.d", "etc/apt/apt.conf.d", "etc/apt/auth.conf.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	status := func(v string) string {
		return "Package: tool\nStatus: install ok installed\nArchitecture: amd64\nVersion: " + v + "\n\n" +
			"Package: gone\nStatus: deinstall ok config-files\nVersion: 0.1\n"
	}
	write(filepath.Join(usr, "lib/pkg/tool"), "tool v1\n", 0o755)
	write(filepath.Join(usr, "bin/suid"), "setuid\n", os.ModeSetuid|0o755)
	if err := os.Symlink("tool", filepath.Join(usr, "bin/alias")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dpkg, "status"), status("1.0"), 0o644)
	write(filepath.Join(dpkg, "lock"), "", 0o640)
	write(filepath.Join(dpkg, "statoverride"), "root ssl-cert 710 /etc/ssl/private\nroot root 4755 /usr/lib/pkg/helper\n", 0o644)
	write(filepath.Join(dpkg, "updates/0001"), "half", 0o644)
	write(filepath.Join(dpkg, "info/tool.list"), "/usr/lib/pkg/tool\n", 0o644)
	write(filepath.Join(etc, "apt/sources.list.d/debian.sources"), "Types: deb\nURIs: http://deb.debian.org/debian\n", 0o644)
	write(filepath.Join(etc, "apt/apt.conf.d/99proxy"), "Acquire::http::Proxy \"http://me:hunter2@proxy:3128\";\n", 0o644)
	write(filepath.Join(etc, "apt/apt.conf.d/10plain"), "APT::Install-Recommends \"false\";\n", 0o644)
	write(filepath.Join(etc, "apt/auth.conf.d/mirror.conf"), "machine mirror login me password hunter2\n", 0o600)
	write(filepath.Join(etc, "apt/auth.conf"), "machine mirror login me password hunter2\n", 0o644)

	oldUsr, oldLocal, oldDpkg, oldEtc := hostUsr, hostLocal, hostDpkg, hostEtc
	hostUsr, hostLocal, hostDpkg, hostEtc = usr, filepath.Join(usr, "local"), dpkg, etc
	t.Cleanup(func() { hostUsr, hostLocal, hostDpkg, hostEtc = oldUsr, oldLocal, oldDpkg, oldEtc })

	upgrade = func(file, content, pkgVersion string) {
		t.Helper()
		p := filepath.Join(usr, file)
		write(p+".dpkg-new", content, 0o755)
		if err := os.Rename(p+".dpkg-new", p); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dpkg, "status-new"), status(pkgVersion), 0o644)
		if err := os.Rename(filepath.Join(dpkg, "status-new"), filepath.Join(dpkg, "status")); err != nil {
			t.Fatal(err)
		}
	}
	return usr, upgrade
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBaseUsrPinned builds a base from a planted host, upgrades a host file
// and the package set the way dpkg does, and checks that the built version
// keeps the old /usr while a rebuild makes a new version with the new one.
func TestBaseUsrPinned(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	usr, upgrade := plantHost(t, filepath.Join(dir, "host"))
	root := filepath.Join(dir, "templates")

	t1, err := EnsureBase(root)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(root, BaseName, t1.Version, usrName)
	if t1.Layers[1].Target != "/usr" || t1.Layers[1].Path != snap || t1.Warning != "" {
		t.Fatalf("/usr layer %+v (warning %q), want the snapshot %s", t1.Layers[1], t1.Warning, snap)
	}
	if got := readString(t, filepath.Join(snap, "lib/pkg/tool")); got != "tool v1\n" {
		t.Fatalf("snapshot tool: %q", got)
	}
	if inode(t, filepath.Join(snap, "lib/pkg/tool")) != inode(t, filepath.Join(usr, "lib/pkg/tool")) {
		t.Error("the snapshot copied lib/pkg/tool instead of linking it")
	}
	if fi, err := os.Lstat(filepath.Join(snap, "bin/suid")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("set-user-ID file in the snapshot: %v %v", fi, err)
	}
	if got, err := os.Readlink(filepath.Join(snap, "bin/alias")); err != nil || got != "tool" {
		t.Errorf("symlink in the snapshot: %q %v", got, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, BaseName), &st); err != nil || st.Mode&0o777 != 0o700 {
		t.Errorf("base directory mode %o (%v), want 0700: the snapshots hold set-user-ID links", st.Mode&0o777, err)
	}

	// The package manager's files in the rootfs.
	rootfs := rootfsOf(t, t1)
	if got := readString(t, filepath.Join(rootfs, "etc", packagesFile)); got != "tool=1.0\n" {
		t.Errorf("package list %q, want tool=1.0 only", got)
	}
	if got := readString(t, filepath.Join(rootfs, "var/lib/dpkg/statoverride")); got != "root root 4755 /usr/lib/pkg/helper\n" {
		t.Errorf("statoverride %q: want only the entry whose group the base has (dpkg refuses unknown ones)", got)
	}
	if got := readString(t, filepath.Join(rootfs, "var/lib/dpkg/info/tool.list")); got != "/usr/lib/pkg/tool\n" {
		t.Errorf("dpkg info: %q", got)
	}
	for _, p := range []string{"var/lib/dpkg/lock", "var/lib/dpkg/updates/0001", "etc/apt/auth.conf", "etc/apt/auth.conf.d", "etc/apt/apt.conf.d/99proxy"} {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); err == nil {
			t.Errorf("%s was copied into the base", p)
		}
	}
	for _, p := range []string{"var/lib/dpkg/updates", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial",
		"etc/apt/sources.list.d/debian.sources", "etc/apt/apt.conf.d/10plain"} {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); err != nil {
			t.Errorf("base lacks %s: %v", p, err)
		}
	}

	// A host upgrade replaces the directory entry, not the linked inode.
	upgrade("lib/pkg/tool", "tool v2\n", "2.0")
	if got := readString(t, filepath.Join(snap, "lib/pkg/tool")); got != "tool v1\n" {
		t.Fatalf("the host upgrade changed the pinned snapshot: %q", got)
	}
	t2, err := EnsureBase(root)
	if err != nil {
		t.Fatal(err)
	}
	if t2.Version == t1.Version {
		t.Fatalf("a changed package set kept base version %s", t1.Version)
	}
	if got := readString(t, filepath.Join(t2.Layers[1].Path, "lib/pkg/tool")); got != "tool v2\n" {
		t.Errorf("new base version's tool: %q", got)
	}
	if got := readString(t, filepath.Join(rootfsOf(t, t2), "etc", packagesFile)); got != "tool=2.0\n" {
		t.Errorf("new package list %q", got)
	}

	// Templates built on the old version keep it; GC removes it once
	// nothing references it, and never the current one.
	s, err := OpenStore(root)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := s.BaseLayers()
	if err != nil || len(refs) != 2 || refs[1] != (LayerRef{Target: "/usr", ID: "base-usr:" + t2.Version}) {
		t.Fatalf("base layer refs %+v %v", refs, err)
	}
	old := []LayerRef{{Target: "/", ID: "base:" + t1.Version}, {Target: "/usr", ID: "base-usr:" + t1.Version}}
	id, err := s.PutManifest(&Manifest{Layers: old, Source: "build"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tag("built-on-old:1", id, Actor{Admin: true}); err != nil {
		t.Fatal(err)
	}
	none := func() (map[string]bool, error) { return map[string]bool{}, nil }
	if _, err := s.GC(none); err != nil {
		t.Fatal(err)
	}
	tm, err := s.Get("built-on-old:1")
	if err != nil {
		t.Fatalf("template built on the old base after GC: %v", err)
	}
	if got := readString(t, filepath.Join(tm.Layers[1].Path, "lib/pkg/tool")); tm.Layers[1].Path != snap || got != "tool v1\n" {
		t.Errorf("template built on the old base: /usr %s holds %q", tm.Layers[1].Path, got)
	}
	if _, err := s.Remove("built-on-old:1", Actor{Admin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(func() (map[string]bool, error) { return map[string]bool{"base:" + t1.Version: true}, nil }); err != nil {
		t.Fatal(err)
	}
	if !complete(filepath.Join(root, BaseName, t1.Version)) {
		t.Fatal("GC removed a base version a running sandbox uses")
	}
	if _, err := s.GC(none); err != nil {
		t.Fatal(err)
	}
	if d := buildDirs(t, root); len(d) != 1 || d[0] != t2.Version {
		t.Errorf("after GC the base directory holds %v, want only %s", d, t2.Version)
	}
}

// TestBaseUsrOtherFS: a store on another file system than /usr cannot link
// it; the base then uses the host /usr in place and says so.
func TestBaseUsrOtherFS(t *testing.T) {
	needRoot(t)
	plantHost(t, filepath.Join(t.TempDir(), "host"))
	var a, b unix.Stat_t
	shm, err := os.MkdirTemp("/dev/shm", "warden-base-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	if unix.Stat(shm, &a) != nil || unix.Stat(hostUsr, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same file system as the temporary directory")
	}
	tp, err := EnsureBase(shm)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Layers[1].Path != hostUsr || !strings.Contains(tp.Warning, "in place") {
		t.Errorf("/usr layer %+v, warning %q; want the host /usr in place with a warning", tp.Layers[1], tp.Warning)
	}
	if _, err := os.Lstat(filepath.Join(shm, BaseName, tp.Version, usrName)); err == nil {
		t.Error("a partial snapshot was left behind")
	}
	if got := readString(t, filepath.Join(rootfsOf(t, tp), "var/lib/dpkg/info/tool.list")); got != "/usr/lib/pkg/tool\n" {
		t.Errorf("dpkg database copied across file systems: %q", got)
	}
}
