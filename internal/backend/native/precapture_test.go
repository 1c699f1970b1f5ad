package native

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// treeOf describes every entry under root: type, mode, owner, size,
// content or link target, user xattrs and mtime (directories' too).
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("type=%o mode=%o uid=%d gid=%d rdev=%d", st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Uid, st.Gid, st.Rdev)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d content=%x mtime=%d", st.Size, sha256.Sum256(b), st.Mtim.Nano())
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			desc += " link=" + l
		case unix.S_IFDIR:
			if rel != "." {
				desc += fmt.Sprintf(" mtime=%d", st.Mtim.Nano())
			}
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
			names := bytes.Split(buf[:n-1], []byte{0})
			sort.Slice(names, func(i, j int) bool { return bytes.Compare(names[i], names[j]) < 0 })
			for _, nm := range names {
				v := make([]byte, 256)
				m, _ := unix.Lgetxattr(p, string(nm), v)
				desc += fmt.Sprintf(" %s=%q", nm, v[:max(m, 0)])
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPreCopyFrozenState: a layer copied in two passes, the first while a
// writer keeps changing it (overwrites, new files, deletions, renames,
// directories made and removed, chmods), the second once the writer has
// stopped (the freeze), equals a plain copy of the stopped layer; files the
// writer never touched keep their first-pass copy.
func TestPreCopyFrozenState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("PRE-COPY UNTESTED: needs root (chown, whiteout devices)")
	}
	src, dst, full := t.TempDir(), t.TempDir(), t.TempDir()
	blob := make([]byte, 256<<10)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	for i := range 40 {
		d := filepath.Join(src, fmt.Sprintf("d%d", i%5))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), blob[:(i+1)*4096], 0o644)
		os.WriteFile(filepath.Join(src, fmt.Sprintf("stable%d", i)), blob[:(i+1)*1024], 0o600)
	}
	os.Symlink("d0/f0", filepath.Join(src, "link"))
	os.Link(filepath.Join(src, "d1/f1"), filepath.Join(src, "hard"))
	if err := unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	unix.Lsetxattr(filepath.Join(src, "d2"), "user.overlay.opaque", []byte("y"), 0)
	time.Sleep(2 * preCopyRecent) // the stable files are older than "just changed"

	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			d := filepath.Join(src, fmt.Sprintf("d%d", r.IntN(5)))
			f := filepath.Join(d, fmt.Sprintf("f%d", r.IntN(60)))
			switch r.IntN(7) {
			case 0, 1:
				os.WriteFile(f, blob[:r.IntN(len(blob))], 0o644)
			case 2:
				if fh, err := os.OpenFile(f, os.O_WRONLY, 0); err == nil { // same size, new bytes
					fh.WriteAt([]byte{byte(n)}, 0)
					fh.Close()
				}
			case 3:
				os.Remove(f)
			case 4:
				os.Rename(f, filepath.Join(src, fmt.Sprintf("d%d", r.IntN(5)), fmt.Sprintf("f%d", r.IntN(60))))
			case 5:
				sub := filepath.Join(d, "sub")
				if os.Mkdir(sub, 0o755) != nil {
					os.RemoveAll(sub)
				} else {
					os.WriteFile(filepath.Join(sub, "x"), blob[:100], 0o644)
				}
			case 6:
				os.Chmod(f, os.FileMode(0o600|r.IntN(0o77)))
			}
		}
	}()
	p := &preCopier{c: &idCopier{base: 0, size: 1 << 31, links: map[uint64]string{}}, seen: map[string]seenFile{}}
	p.live(ctx, src, dst)
	var before unix.Stat_t
	unix.Lstat(filepath.Join(dst, "stable7"), &before)
	close(stop) // the freeze
	wg.Wait()
	p.c.links = map[uint64]string{}
	if err := p.sync(ctx, src, dst, true); err != nil {
		t.Fatal(err)
	}
	c := &idCopier{base: 0, size: 1 << 31, links: map[uint64]string{}}
	if err := c.tree(ctx, src, full, true); err != nil {
		t.Fatal(err)
	}
	got, want := treeOf(t, dst), treeOf(t, full)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: pre-copied %q, want %q", k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: in the pre-copy, not in the frozen layer", k)
		}
	}
	var hs, ht unix.Stat_t
	unix.Lstat(filepath.Join(dst, "hard"), &hs)
	unix.Lstat(filepath.Join(dst, "d1/f1"), &ht)
	if _, err := os.Lstat(filepath.Join(src, "d1/f1")); err == nil {
		var s1, s2 unix.Stat_t
		unix.Lstat(filepath.Join(src, "hard"), &s1)
		unix.Lstat(filepath.Join(src, "d1/f1"), &s2)
		if s1.Ino == s2.Ino && hs.Ino != ht.Ino {
			t.Error("hard links are not kept")
		}
	}
	var after unix.Stat_t
	unix.Lstat(filepath.Join(dst, "stable7"), &after)
	if before.Ino == 0 || after.Ino != before.Ino {
		t.Errorf("an untouched file was copied again by the frozen pass (inode %d, then %d)", before.Ino, after.Ino)
	}
	if len(p.seen) < 40 {
		t.Errorf("the first pass copied %d files", len(p.seen))
	}
}
