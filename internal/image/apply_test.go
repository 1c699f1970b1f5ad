package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var datedTime = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// layer1 exercises every entry type of a lower layer.
func layer1() []ent {
	notes := fileE("home/alice/notes", "secret notes")
	notes.mode, notes.uid, notes.gid = 0o600, 1000, 1000
	notes.pax = map[string]string{
		"SCHILY.xattr.user.note":              "hello",
		"SCHILY.xattr.user.overlay.redirect":  "/etc", // forged overlay metadata: dropped
		"SCHILY.xattr.trusted.overlay.opaque": "y",    // other namespace: dropped
	}
	ping := fileE("usr/bin/ping", "ping binary")
	ping.mode = 0o755
	ping.pax = map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}
	su := fileE("usr/bin/su", "su binary")
	su.mode = 0o4755
	wall := fileE("usr/bin/wall", "wall binary")
	wall.mode, wall.gid = 0o2755, 5
	shadow := fileE("etc/shadow", "root:*:::::::")
	shadow.mode, shadow.gid = 0o640, 42
	alice := dirE("home/alice/", 0o700)
	alice.uid, alice.gid = 1000, 1000
	localtime := symE("etc/localtime", "/usr/share/zoneinfo/UTC")
	localtime.uid, localtime.gid = 7, 8
	fifo := ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o620, uid: 1000, gid: 5}
	null := ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666, major: 1}
	sda := ent{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660, major: 8}
	dated := dirE("dated/", 0o755)
	dated.mtime = datedTime
	xdir := dirE("/data/xdir/", 0o755)
	xdir.pax = map[string]string{"SCHILY.xattr.user.dirattr": "v"}
	return []ent{
		dirE("./", 0o755),
		dirE("etc/", 0o755),
		fileE("etc/passwd", "root:x:0:0::/root:/bin/sh\n"),
		shadow,
		dirE("usr/bin/", 0o755),
		su, wall, ping,
		dirE("tmp/", 0o1777),
		alice, notes,
		symE("bin", "usr/bin"),
		localtime,
		linkE("usr/bin/su-link", "usr/bin/su"),
		fifo, null, sda,
		dirE("opq/", 0o755),
		fileE("opq/old1", "old1"),
		fileE("opq/sub/old2", "old2"),
		fileE("gone", "bye"),
		fileE("gonedir/x", "x"),
		dated,
		fileE("dated/f", "f"),
		xdir,
	}
}

var layer1Stats = Stats{
	Files: 11, Dirs: 8, Symlinks: 2, Hardlinks: 1, FIFOs: 1,
	SkippedDevices: 2, SkippedXattrs: 3,
	// 25 entries and 7 parents made for them (home, usr, run, dev,
	// opq/sub, gonedir, data).
	Entries: 32,
	Bytes: int64(len("secret notes" + "ping binary" + "su binary" + "wall binary" + "root:*:::::::" +
		"root:x:0:0::/root:/bin/sh\n" + "old1" + "old2" + "bye" + "x" + "f")),
}

// layer2 deletes and hides layer-1 content.
func layer2() []ent {
	opq := dirE("opq/", 0o750)
	return []ent{
		whE(".wh.gone"),
		whE("./.wh.gonedir"),
		whE("opq/.wh..wh..opq"),
		opq, // after the marker: must keep it
		fileE("opq/new", "new"),
		whE("newdir/.wh..wh..opq"), // dir not in this layer yet
		whE("/etc/.wh.shadow"),     // parent created implicitly
	}
}

// 7 entries and 3 parents made for them (opq, newdir, etc).
var layer2Stats = Stats{Files: 1, Dirs: 1, Whiteouts: 3, OpaqueDirs: 2, Bytes: 3, Entries: 10}

func applyEntries(t *testing.T, dir string, ents ...ent) (Stats, error) {
	t.Helper()
	return ApplyLayer(dir, bytes.NewReader(tarBytes(t, ents...)))
}

func checkMode(t *testing.T, p string, wantType uint32, perm uint32, uid, gid uint32) {
	t.Helper()
	st := lstat(t, p)
	if got := st.Mode & unix.S_IFMT; got != wantType {
		t.Errorf("%s: type %o, want %o", p, got, wantType)
	}
	if got := st.Mode & 0o7777; got != perm {
		t.Errorf("%s: mode %o, want %o", p, got, perm)
	}
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: owner %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
	}
}

func TestApplyLayerEntryTypes(t *testing.T) {
	requireRoot(t)
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk-fallback"
		}
		t.Run(name, func(t *testing.T) {
			if walk {
				noOpenat2.Store(true)
				t.Cleanup(func() { noOpenat2.Store(false) })
			}
			dir := t.TempDir()
			st, err := applyEntries(t, dir, layer1()...)
			if err != nil {
				t.Fatal(err)
			}
			if st != layer1Stats {
				t.Errorf("stats = %+v\nwant    %+v", st, layer1Stats)
			}
			checkLayer1(t, dir)
		})
	}
}

func checkLayer1(t *testing.T, dir string) {
	t.Helper()
	p := func(s string) string { return filepath.Join(dir, s) }
	checkMode(t, p("etc/passwd"), unix.S_IFREG, 0o644, 0, 0)
	checkMode(t, p("etc/shadow"), unix.S_IFREG, 0o640, 0, 42)
	checkMode(t, p("usr/bin/su"), unix.S_IFREG, 0o4755, 0, 0)
	checkMode(t, p("usr/bin/wall"), unix.S_IFREG, 0o2755, 0, 5)
	checkMode(t, p("tmp"), unix.S_IFDIR, 0o1777, 0, 0)
	checkMode(t, p("home/alice"), unix.S_IFDIR, 0o700, 1000, 1000)
	checkMode(t, p("home/alice/notes"), unix.S_IFREG, 0o600, 1000, 1000)
	checkMode(t, p("home"), unix.S_IFDIR, 0o755, 0, 0) // implicit parent
	checkMode(t, p("run/fifo"), unix.S_IFIFO, 0o620, 1000, 5)
	checkMode(t, p("etc/localtime"), unix.S_IFLNK, 0o777, 7, 8)

	if got := readFile(t, p("etc/passwd")); got != "root:x:0:0::/root:/bin/sh\n" {
		t.Errorf("etc/passwd = %q", got)
	}
	if got, _ := os.Readlink(p("bin")); got != "usr/bin" {
		t.Errorf("bin -> %q", got)
	}
	if got, _ := os.Readlink(p("etc/localtime")); got != "/usr/share/zoneinfo/UTC" {
		t.Errorf("etc/localtime -> %q", got)
	}
	su, link := lstat(t, p("usr/bin/su")), lstat(t, p("usr/bin/su-link"))
	if su.Ino != link.Ino || su.Nlink != 2 {
		t.Errorf("hard link: inodes %d/%d, nlink %d", su.Ino, link.Ino, su.Nlink)
	}
	for _, dev := range []string{"dev/null", "dev/sda"} {
		if _, err := os.Lstat(p(dev)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("device %s was created (err %v)", dev, err)
		}
	}
	if v, err := getxattr(p("home/alice/notes"), "user.note"); err != nil || v != "hello" {
		t.Errorf("user.note = %q, %v", v, err)
	}
	if v, err := getxattr(p("data/xdir"), "user.dirattr"); err != nil || v != "v" {
		t.Errorf("dir user.dirattr = %q, %v", v, err)
	}
	for file, attr := range map[string]string{
		"home/alice/notes": "user.overlay.redirect",
		"usr/bin/ping":     "security.capability",
	} {
		if _, err := getxattr(p(file), attr); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: %s present (err %v), want it dropped", file, attr, err)
		}
	}
	// Directory times are set after their contents.
	if st := lstat(t, p("dated")); !time.Unix(st.Mtim.Unix()).Equal(datedTime) {
		t.Errorf("dated mtime = %v, want %v", time.Unix(st.Mtim.Unix()), datedTime)
	}
	for _, f := range []string{"etc/passwd", "etc", "bin", "etc/localtime", "run/fifo", "."} {
		if st := lstat(t, p(f)); !time.Unix(st.Mtim.Unix()).Equal(testTime) {
			t.Errorf("%s mtime = %v, want %v", f, time.Unix(st.Mtim.Unix()).UTC(), testTime)
		}
	}
}

func TestApplyLayerWhiteouts(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	st, err := applyEntries(t, dir, layer2()...)
	if err != nil {
		t.Fatal(err)
	}
	if st != layer2Stats {
		t.Errorf("stats = %+v\nwant    %+v", st, layer2Stats)
	}
	checkLayer2(t, dir)
}

func checkLayer2(t *testing.T, dir string) {
	t.Helper()
	for _, wh := range []string{"gone", "gonedir", "etc/shadow"} {
		st := lstat(t, filepath.Join(dir, wh))
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("whiteout %s: mode %o rdev %d, want char device 0/0", wh, st.Mode, st.Rdev)
		}
	}
	for _, d := range []string{"opq", "newdir"} {
		if v, err := getxattr(filepath.Join(dir, d), opaqueXattr); err != nil || v != "y" {
			t.Errorf("%s: %s = %q, %v; want y", d, opaqueXattr, v, err)
		}
	}
	checkMode(t, filepath.Join(dir, "opq"), unix.S_IFDIR, 0o750, 0, 0)
	if got := entries(t, filepath.Join(dir, "opq")); !slices.Equal(got, []string{"new"}) {
		t.Errorf("opq holds %v", got)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"etc", "gone", "gonedir", "newdir", "opq"}) {
		t.Errorf("layer 2 root holds %v", got)
	}
}

func TestApplyLayerBadWhiteouts(t *testing.T) {
	requireRoot(t)
	for _, name := range []string{".wh.", "a/.wh..", "a/.wh...", ".wh..wh.plnk", ".wh..wh..opqx", ".wh.x/y", "a/.wh..wh..opq/b"} {
		t.Run(name, func(t *testing.T) {
			_, err := applyEntries(t, t.TempDir(), whE(name))
			if err == nil {
				t.Fatalf("whiteout %q accepted", name)
			}
			t.Logf("%q: %v", name, err)
		})
	}
}

func TestApplyLayerReplace(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	outside := t.TempDir()
	_, err := applyEntries(t, dir,
		fileE("a", "file"), dirE("a/", 0o755), fileE("a/inner", "x"), // file replaced by dir
		dirE("b/", 0o755), fileE("b/c/d", "deep"), fileE("b", "now a file"), // non-empty dir replaced by file
		dirE("c/", 0o700), fileE("c/keep", "k"), dirE("c/", 0o711), // dir over dir: metadata only
		symE("d", "e"), fileE("e", "target"), fileE("d", "replaced link"), // file over symlink
		symE("f", filepath.Join(outside, "f")), fileE("f", "not through"), // file over escaping symlink
		fileE("g", "1"), symE("g", "h"), // symlink over file
		fileE("h", "2"), fileE("h", "3"), // file over file
		fileE("i", "i"), linkE("j", "i"), fileE("j", "own"), // file over hard link
		ent{name: "k", typ: tar.TypeChar, major: 1}, linkE("k2", "k"), // hard link to skipped device
		fileE("k", "no longer a device"), linkE("k3", "k"),
	)
	if err != nil {
		t.Fatal(err)
	}
	p := func(s string) string { return filepath.Join(dir, s) }
	if got := readFile(t, p("a/inner")); got != "x" {
		t.Errorf("a/inner = %q", got)
	}
	if got := readFile(t, p("b")); got != "now a file" {
		t.Errorf("b = %q", got)
	}
	checkMode(t, p("c"), unix.S_IFDIR, 0o711, 0, 0)
	if got := entries(t, p("c")); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("c holds %v", got)
	}
	if got := readFile(t, p("d")); got != "replaced link" {
		t.Errorf("d = %q", got)
	}
	if got := readFile(t, p("e")); got != "target" {
		t.Errorf("e = %q (written through the old symlink d)", got)
	}
	if got := entries(t, outside); len(got) != 0 {
		t.Errorf("outside dir got %v", got)
	}
	if got, err := os.Readlink(p("g")); err != nil || got != "h" {
		t.Errorf("g -> %q, %v", got, err)
	}
	if got := readFile(t, p("h")); got != "3" {
		t.Errorf("h = %q", got)
	}
	if got := readFile(t, p("i")); got != "i" {
		t.Errorf("i = %q (replacing hard link j changed i)", got)
	}
	if _, err := os.Lstat(p("k2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("hard link to skipped device was created: %v", err)
	}
	if st := lstat(t, p("k3")); st.Nlink != 2 {
		t.Errorf("k3 nlink = %d", st.Nlink)
	}
}

func TestApplyLayerHardlinkErrors(t *testing.T) {
	requireRoot(t)
	for name, ents := range map[string][]ent{
		"missing target":   {linkE("l", "nope")},
		"directory target": {dirE("d/", 0o755), linkE("l", "d")},
		"self":             {fileE("l", "x"), linkE("l", "l")},
		"root":             {linkE("l", "/")},
		"target inside":    {fileE("d/f", "x"), linkE("d", "d/f")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := applyEntries(t, t.TempDir(), ents...)
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
}

func TestApplyLayerMisc(t *testing.T) {
	requireRoot(t)
	t.Run("not empty", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
		if _, err := applyEntries(t, dir, fileE("a", "a")); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing dir", func(t *testing.T) {
		if _, err := applyEntries(t, filepath.Join(t.TempDir(), "nope"), fileE("a", "a")); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("truncated", func(t *testing.T) {
		data := tarBytes(t, fileE("a", strings.Repeat("x", 4096)))
		_, err := ApplyLayer(t.TempDir(), bytes.NewReader(data[:1024]))
		if err == nil {
			t.Fatal("truncated tar accepted")
		}
	})
	for _, id := range []string{"uid", "gid"} {
		for _, v := range []string{"-1", "4294967295", "99999999999"} {
			t.Run("bad "+id+" "+v, func(t *testing.T) {
				data := append(rawPAX([2]string{id, v}), tarBytes(t, fileE("a", "a"))...)
				_, err := ApplyLayer(t.TempDir(), bytes.NewReader(data))
				if err == nil {
					t.Fatal("accepted")
				}
				t.Log(err)
			})
		}
	}
	t.Run("big uid", func(t *testing.T) {
		dir := t.TempDir()
		data := append(rawPAX([2]string{"uid", "100000"}, [2]string{"gid", "65535"}), tarBytes(t, fileE("a", "a"))...)
		if _, err := ApplyLayer(dir, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		checkMode(t, filepath.Join(dir, "a"), unix.S_IFREG, 0o644, 100000, 65535)
	})
	t.Run("sparse", func(t *testing.T) {
		// PAX GNU sparse 0.1: a terabyte of holes from a few bytes.
		data := append(rawPAX(
			[2]string{"GNU.sparse.numblocks", "1"},
			[2]string{"GNU.sparse.map", "0,1"},
			[2]string{"GNU.sparse.size", "1000000000000"},
		), tarBytes(t, fileE("a", "a"))...)
		hdr, err := tar.NewReader(bytes.NewReader(data)).Next()
		if err != nil || hdr.Size != 1000000000000 {
			t.Fatalf("test archive: %v, %v", hdr, err)
		}
		_, err = ApplyLayer(t.TempDir(), bytes.NewReader(data))
		if err == nil || !strings.Contains(err.Error(), "sparse") {
			t.Fatalf("sparse entry: err = %v", err)
		}
	})
	t.Run("non-dir root", func(t *testing.T) {
		if _, err := applyEntries(t, t.TempDir(), fileE(".", "")); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("forged opaque", func(t *testing.T) {
		dir := t.TempDir()
		d := dirE("d/", 0o755)
		d.pax = map[string]string{"SCHILY.xattr.user.overlay.opaque": "y", "SCHILY.xattr.user.overlay.whiteout": "y"}
		st, err := applyEntries(t, dir, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := getxattr(filepath.Join(dir, "d"), opaqueXattr); err == nil || st.SkippedXattrs != 2 {
			t.Errorf("forged overlay xattrs applied (skipped %d, err %v)", st.SkippedXattrs, err)
		}
	})
	t.Run("empty stream", func(t *testing.T) {
		st, err := ApplyLayer(t.TempDir(), bytes.NewReader(nil))
		if err != nil || st != (Stats{}) {
			t.Fatalf("%+v, %v", st, err)
		}
	})
	t.Run("large file", func(t *testing.T) {
		dir := t.TempDir()
		body := strings.Repeat("0123456789abcdef", 100000)
		st, err := applyEntries(t, dir, fileE("big", body))
		if err != nil || st.Bytes != int64(len(body)) {
			t.Fatalf("%+v, %v", st, err)
		}
		if readFile(t, filepath.Join(dir, "big")) != body {
			t.Fatal("content differs")
		}
	})
}

// traversalCases are layers that try to reach outside the layer directory.
// canary is the absolute path of a directory next to it that must stay
// empty; "../canary" reaches it from the layer root.
func traversalCases(canary string) map[string][]ent {
	return map[string][]ent{
		"dotdot":                  {fileE("../evil", "x")},
		"dotdot into canary":      {fileE("../canary/evil", "x")},
		"clean then escape":       {fileE("a/../../evil", "x")},
		"escape from root":        {fileE("/../canary/evil", "x")},
		"deep escape":             {fileE("a/b/../../../canary/evil", "x")},
		"dir escape":              {dirE("../canary/d/", 0o755)},
		"abs symlink write":       {symE("x", canary), fileE("x/evil", "x")},
		"etc symlink write":       {symE("x", "/etc"), fileE("x/warden-image-test-evil", "x")},
		"rel symlink write":       {symE("x", "../../.."), fileE("x/evil", "x")},
		"rel symlink to canary":   {symE("x", "../canary"), fileE("x/evil", "x")},
		"symlink chain":           {symE("a", "b"), symE("b", "../canary"), fileE("a/evil", "x")},
		"inner symlink":           {dirE("d/", 0o755), symE("x", "d"), fileE("x/f", "x")},
		"dir through symlink":     {symE("x", canary), dirE("x/sub/", 0o755)},
		"symlink through symlink": {symE("x", canary), symE("x/evil", "/")},
		"fifo through symlink":    {symE("x", canary), ent{name: "x/evil", typ: tar.TypeFifo, mode: 0o600}},
		"link through symlink":    {fileE("f", "x"), symE("x", canary), linkE("x/evil", "f")},
		"whiteout through link":   {symE("x", canary), whE("x/.wh.evil")},
		"opaque through link":     {symE("x", canary), whE("x/.wh..wh..opq")},
		"hardlink dotdot":         {linkE("passwd", "../../etc/passwd")},
		"hardlink canary":         {linkE("evil", "../canary/f")},
		"hardlink abs":            {linkE("shadow", "/etc/shadow")},
		"hardlink via symlink":    {symE("x", "/etc"), linkE("passwd", "x/passwd")},
		"hardlink via rel link":   {symE("x", "../canary"), linkE("f", "x/f")},
		"dir replaced by link":    {dirE("d/", 0o755), symE("d", canary), fileE("d/evil", "x")},
		"parent is file":          {fileE("p", "x"), fileE("p/evil", "x")},
	}
}

func TestApplyLayerTraversal(t *testing.T) {
	requireRoot(t)
	for _, walk := range []bool{false, true} {
		mode := "openat2"
		if walk {
			mode = "walk-fallback"
		}
		t.Run(mode, func(t *testing.T) {
			if walk {
				noOpenat2.Store(true)
				t.Cleanup(func() { noOpenat2.Store(false) })
			}
			base := t.TempDir()
			canary := filepath.Join(base, "canary")
			for name, ents := range traversalCases(canary) {
				t.Run(name, func(t *testing.T) {
					base := t.TempDir()
					dir, canary := filepath.Join(base, "layer"), filepath.Join(base, "canary")
					os.Mkdir(dir, 0o755)
					os.Mkdir(canary, 0o755)
					// Rewrite absolute canary paths to this subtest's canary.
					for i := range ents {
						if strings.HasPrefix(ents[i].link, "/") && strings.HasSuffix(ents[i].link, "/canary") {
							ents[i].link = canary
						}
					}
					_, err := applyEntries(t, dir, ents...)
					if name == "inner symlink" {
						// Stays inside, but still refused: no writes through symlinks.
						if err == nil {
							t.Fatal("write through an in-layer symlink accepted")
						}
					} else if err == nil {
						t.Fatalf("accepted; layer:\n%s", describeTree(dir))
					}
					if !errors.Is(err, ErrUnsafeEntry) && !strings.Contains(err.Error(), "not an entry of this layer") {
						t.Errorf("error does not say why: %v", err)
					}
					t.Log(err)
					if got := entries(t, canary); len(got) != 0 {
						t.Errorf("canary dir got %v", got)
					}
					if v, err := getxattr(canary, opaqueXattr); err == nil {
						t.Errorf("canary got %s=%q", opaqueXattr, v)
					}
					if got := entries(t, base); !slices.Equal(got, []string{"canary", "layer"}) {
						t.Errorf("base dir holds %v", got)
					}
					if _, err := os.Lstat("/etc/warden-image-test-evil"); err == nil {
						t.Errorf("/etc/warden-image-test-evil created")
					}
				})
			}
		})
	}
}
