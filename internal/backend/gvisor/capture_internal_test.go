package gvisor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// tarOf builds a tar as gVisor's TarUpperLayer writes one ("./" names,
// directories before their children, xattrs in PAX records).
func tarOf(t *testing.T, hdrs []*tar.Header, bodies map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		if b, ok := bodies[h.Name]; ok {
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if b, ok := bodies[h.Name]; ok {
			if _, err := tw.Write([]byte(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestLayerFromTar: the root overlay's upper layer as gVisor exports it
// becomes a layer in the template store's form: owners as given (the ids
// the sandbox sees), modes with set-id bits, a whiteout, gVisor's trusted
// opaque marker as user.overlay.opaque, the sandbox's user.* xattrs but
// not user.overlay.* ones it set, a hard link, a symlink; the backend's
// /.warden is left out, and whiteouts linked to one under it are kept.
func TestLayerFromTar(t *testing.T) {
	dst := t.TempDir()
	asked := 0
	hdrs := []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./.warden/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./.warden/config.json", Typeflag: tar.TypeChar, Mode: 0},
		{Name: "./home/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./home/user/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000},
		{Name: "./home/user/a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 1000, Gid: 1000,
			PAXRecords: map[string]string{"SCHILY.xattr.user.mine": "kept", "SCHILY.xattr.user.overlay.redirect": "/etc", "SCHILY.xattr.security.capability": "x"}},
		{Name: "./home/user/hard", Typeflag: tar.TypeLink, Linkname: "./home/user/a.txt"},
		{Name: "./home/user/link", Typeflag: tar.TypeSymlink, Linkname: "a.txt", Uid: 1000, Gid: 1000},
		{Name: "./home/user/gone", Typeflag: tar.TypeLink, Linkname: "./.warden/config.json"},
		{Name: "./home/user/gone2", Typeflag: tar.TypeChar, Mode: 0},
		{Name: "./home/user/gone3", Typeflag: tar.TypeLink, Linkname: "./home/user/gone2"},
		{Name: "./home/user/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Name: "./suid", Typeflag: tar.TypeReg, Mode: 0o4755},
		{Name: "./opt/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}},
	}
	buf := tarOf(t, hdrs, map[string]string{"./home/user/a.txt": "hello", "./suid": "#!"})
	x := &layerWriter{root: -1, dir: func() (string, error) { asked++; return dst, nil }}
	err := x.extract(context.Background(), buf)
	x.close()
	if err != nil {
		t.Fatal(err)
	}
	if asked != 1 {
		t.Fatalf("the layer's directory was asked for %d times", asked)
	}
	owner := func(rel string, uid int, mode uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, rel), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != uid || int(st.Gid) != uid || (mode != 0 && st.Mode&0o7777 != mode) {
			t.Errorf("%s: owner %d:%d mode %o, want %d:%d %o", rel, st.Uid, st.Gid, st.Mode&0o7777, uid, uid, mode)
		}
	}
	owner(".", 0, 0o755)
	owner("home/user", 1000, 0o750)
	owner("home/user/a.txt", 1000, 0o644)
	owner("home/user/link", 1000, 0)
	owner("suid", 0, 0o4755)
	var a, h, g unix.Stat_t
	unix.Lstat(filepath.Join(dst, "home/user/a.txt"), &a)
	unix.Lstat(filepath.Join(dst, "home/user/hard"), &h)
	if a.Ino == 0 || a.Ino != h.Ino {
		t.Error("the hard link became a copy")
	}
	// gVisor links every whiteout to its first, which may be under the
	// skipped /.warden.
	for _, w := range []string{"gone", "gone2", "gone3"} {
		if err := unix.Lstat(filepath.Join(dst, "home/user", w), &g); err != nil || g.Mode&unix.S_IFMT != unix.S_IFCHR || g.Rdev != 0 {
			t.Errorf("the whiteout %s: mode %o rdev %d (%v)", w, g.Mode, g.Rdev, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "home/user/null")); err == nil {
		t.Error("a device other than a whiteout was made")
	}
	if _, err := os.Lstat(filepath.Join(dst, ".warden")); err == nil {
		t.Error("the backend's /.warden is in the layer")
	}
	if l, err := os.Readlink(filepath.Join(dst, "home/user/link")); err != nil || l != "a.txt" {
		t.Errorf("symlink: %q %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "home/user/a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("content: %q %v", b, err)
	}
	xattr := func(rel, name string) (string, error) {
		b := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(dst, rel), name, b)
		if err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	if v, err := xattr("opt", "user.overlay.opaque"); err != nil || v != "y" {
		t.Errorf("opaque marker: %q %v", v, err)
	}
	if v, err := xattr("home/user/a.txt", "user.mine"); err != nil || v != "kept" {
		t.Errorf("the sandbox's own xattr: %q %v", v, err)
	}
	for _, name := range []string{"user.overlay.redirect", "security.capability"} {
		if _, err := xattr("home/user/a.txt", name); err == nil {
			t.Errorf("xattr %s was copied", name)
		}
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(dst, "home/user"), &st)
	if st.Mtim.Sec != 1700000000 {
		t.Errorf("directory mtime %d, want the tar's", st.Mtim.Sec)
	}
}

// TestLayerFromTarEmpty: an upper layer with only the root (and the
// backend's own directory) makes no layer.
func TestLayerFromTarEmpty(t *testing.T) {
	buf := tarOf(t, []*tar.Header{{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "./.warden/", Typeflag: tar.TypeDir, Mode: 0o755}}, nil)
	x := &layerWriter{root: -1, dir: func() (string, error) { t.Fatal("a layer was made of an empty upper layer"); return "", nil }}
	if err := x.extract(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
	x.close()
}

// TestLayerFromTarHostile: the tar comes from the sentry; names out of the
// layer, and writes through a symlink the tar made, are refused, and
// nothing lands outside the layer.
func TestLayerFromTarHostile(t *testing.T) {
	for name, hdrs := range map[string][]*tar.Header{
		"dotdot":   {{Name: "./../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute": {{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"inner":    {{Name: "./a/../../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"symlink parent": {
			{Name: "./out", Typeflag: tar.TypeSymlink, Linkname: ".."},
			{Name: "./out/escape", Typeflag: tar.TypeReg, Mode: 0o644},
		},
		"hard link out": {
			{Name: "./h", Typeflag: tar.TypeLink, Linkname: "../escape-src"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "layer")
			os.Mkdir(dst, 0o700)
			os.WriteFile(filepath.Join(parent, "escape-src"), []byte("host"), 0o600)
			x := &layerWriter{root: -1, dir: func() (string, error) { return dst, nil }}
			err := x.extract(context.Background(), tarOf(t, hdrs, nil))
			x.close()
			if err == nil {
				t.Fatal("a hostile tar was taken")
			}
			ents, _ := os.ReadDir(parent)
			for _, e := range ents {
				if e.Name() != "layer" && e.Name() != "escape-src" {
					t.Fatalf("%s written outside the layer (%v)", e.Name(), err)
				}
			}
		})
	}
}

// TestCaptureMemoryFiles: the host cgroup's memory that cannot be
// reclaimed (what must fit before a capture's raised limit is lowered) is
// anonymous plus shared memory, hierarchical on v1; page cache is not.
func TestCaptureMemoryFiles(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(v1, "memory.stat"), []byte("cache 900\nrss 1\nshmem 2\ntotal_cache 9000\ntotal_rss 100\ntotal_shmem 50\n"), 0o644)
	os.WriteFile(filepath.Join(v2, "memory.stat"), []byte("anon 100\nfile 9000\nshmem 50\nfile_mapped 7\n"), 0o644)
	for _, m := range []memFiles{{dir: v1}, {dir: v2, v2: true}} {
		if n, err := m.pinned(); err != nil || n != 150 {
			t.Errorf("pinned (v2 %v) = %d, %v; want 150", m.v2, n, err)
		}
	}
	os.WriteFile(filepath.Join(v2, "memory.max"), []byte("max\n"), 0o644)
	if n, err := (memFiles{dir: v2, v2: true}).limit(); err != nil || n != -1 {
		t.Errorf("limit of max = %d, %v", n, err)
	}
	m := memFiles{dir: v1}
	if err := m.setLimit(3<<20, true); err != nil {
		t.Fatal(err)
	}
	if n, err := m.limit(); err != nil || n != 3<<20 {
		t.Errorf("v1 limit after set = %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(v1, "memory.memsw.limit_in_bytes")); err == nil {
		t.Error("memsw written where the kernel has none")
	}
}

// TestVolumeTargets: a volume may not cover the backend's own directory.
func TestVolumeTargets(t *testing.T) {
	for _, p := range []string{"/.warden", "/.warden/run", "/.warden/vol/0"} {
		if err := checkVolumeTargets([]backend.VolumeMount{{Source: "/x", Target: p}}); !errors.Is(err, backend.ErrInvalidSpec) {
			t.Errorf("volume at %s: %v, want ErrInvalidSpec", p, err)
		}
	}
	if err := checkVolumeTargets([]backend.VolumeMount{{Source: "/x", Target: "/.wardenx"}, {Source: "/y", Target: "/data"}}); err != nil {
		t.Errorf("volumes at /.wardenx and /data: %v", err)
	}
}
