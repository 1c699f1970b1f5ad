package diskimg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func loopsOf(t *testing.T, img string) int {
	t.Helper()
	n := 0
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == img {
			n++
		}
	}
	return n
}

func TestMountFillRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p, err := New(t.TempDir())
	if err != nil {
		t.Fatalf("this host cannot make disk images: %v", err)
	}
	target := t.TempDir()
	const size = 32 << 20
	if err := p.Mount("sb-x", size, target, 12345); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove("sb-x", target) })
	if !Mounted(target) {
		t.Fatal("not mounted")
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil || st.Uid != 12345 || st.Mode&0o777 != 0o700 {
		t.Fatalf("root of the image: uid %d mode %o err %v", st.Uid, st.Mode&0o777, err)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(target, &sf); err != nil {
		t.Fatal(err)
	}
	if total := int64(sf.Blocks) * sf.Bsize; total > size || total < size*9/10 {
		t.Fatalf("filesystem size %d for a %d limit", total, size)
	}
	// Writing past the limit fails with ENOSPC.
	f, err := os.Create(filepath.Join(target, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(buf)
	}
	if werr == nil {
		werr = f.Sync()
	}
	f.Close()
	if !errors.Is(werr, unix.ENOSPC) {
		t.Fatalf("writing 64 MiB into a 32 MiB image: %v, want ENOSPC", werr)
	}
	if img, _ := filepath.EvalSymlinks(p.Image("sb-x")); loopsOf(t, img) != 1 {
		t.Fatalf("want one loop device on the image")
	}
	if ids, err := p.Images(); err != nil || len(ids) != 1 || ids[0] != "sb-x" {
		t.Fatalf("images: %v %v", ids, err)
	}
	img, _ := filepath.EvalSymlinks(p.Image("sb-x"))
	if err := p.Remove("sb-x", target); err != nil {
		t.Fatal(err)
	}
	if Mounted(target) {
		t.Fatal("still mounted after Remove")
	}
	if _, err := os.Stat(p.Image("sb-x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left behind: %v", err)
	}
	if n := loopsOf(t, img); n != 0 {
		t.Fatalf("%d loop devices left on the removed image", n)
	}
	if err := p.Remove("sb-x", target); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

// BenchmarkMountRemove measures what a disk image adds to a sandbox's
// create and delete (the 1 GiB template is formatted once, before).
func BenchmarkMountRemove(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	p, err := New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	target := b.TempDir()
	if _, err := p.template(1 << 30); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := p.Mount("sb-b", 1<<30, target, 12345); err != nil {
			b.Fatal(err)
		}
		if err := p.Remove("sb-b", target); err != nil {
			b.Fatal(err)
		}
	}
}
