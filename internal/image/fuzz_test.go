package image

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzApplyLayer feeds arbitrary bytes to ApplyLayer and checks that it
// never panics, never touches anything outside the layer directory (a
// sibling canary directory and a fixed absolute one stay empty) and never
// leaves a device node (other than a 0/0 whiteout) or forged overlay
// metadata in the layer.
func FuzzApplyLayer(f *testing.F) {
	requireRoot(f)
	fixed := filepath.Join(os.TempDir(), "warden-image-fuzz-canary")
	if err := os.MkdirAll(fixed, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.Remove(fixed) }) // only if still empty

	// Small seeds: minimizing a new input costs an execution per byte
	// removed, so big seeds would eat the fuzzing time.
	for _, layer := range [][]ent{layer1(), layer2()} {
		for chunk := range slices.Chunk(layer, 3) {
			f.Add(tarBytes(f, chunk...))
		}
	}
	for _, ents := range traversalCases(fixed) {
		f.Add(tarBytes(f, ents...))
	}
	f.Add(tarBytes(f, symE("x", "../canary"), dirE("x/", 0o755), fileE("x/f", "x")))
	f.Add(tarBytes(f, dirE("a/", 0o755), fileE("a/b", "x"), whE("a/.wh..wh..opq"), fileE("a", "x"), linkE("c", "a")))
	f.Add(append(rawPAX([2]string{"SCHILY.xattr.user.overlay.opaque", "y"}, [2]string{"SCHILY.xattr.user.x", "1"}),
		tarBytes(f, dirE("d/", 0o755))...))
	f.Add(append(rawPAX([2]string{"path", "../canary/pax"}), tarBytes(f, fileE("a", "x"))...))
	f.Add(append(rawPAX([2]string{"linkpath", "../canary/f"}), tarBytes(f, linkE("l", "x"))...))

	// Scratch space, on tmpfs when there is one: executions are cheap then,
	// which matters when the fuzzer minimizes new inputs.
	scratch, err := os.MkdirTemp("/dev/shm", "warden-image-fuzz-")
	if err != nil {
		scratch = f.TempDir()
	} else {
		f.Cleanup(func() { os.RemoveAll(scratch) })
	}
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, data []byte) {
		base := filepath.Join(scratch, strconv.FormatInt(n.Add(1), 10))
		if err := os.Mkdir(base, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		dir, canary := filepath.Join(base, "layer"), filepath.Join(base, "canary")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(canary, 0o755); err != nil {
			t.Fatal(err)
		}
		ApplyLayer(dir, bytes.NewReader(data)) // errors are fine; escapes are not

		if got := entries(t, canary); len(got) != 0 {
			t.Fatalf("sibling canary got %v", got)
		}
		if got := entries(t, base); !slices.Equal(got, []string{"canary", "layer"}) {
			t.Fatalf("base dir holds %v", got)
		}
		if got, err := os.ReadDir(fixed); err == nil && len(got) != 0 {
			t.Fatalf("fixed canary %s got %v", fixed, got)
		}
		for _, c := range []string{canary, fixed} {
			if _, err := getxattr(c, opaqueXattr); err == nil {
				t.Fatalf("%s marked opaque", c)
			}
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFBLK:
				t.Errorf("block device %s", p)
			case unix.S_IFCHR:
				if st.Rdev != 0 {
					t.Errorf("char device %s (rdev %d)", p, st.Rdev)
				}
			case unix.S_IFLNK:
				return nil
			}
			buf := make([]byte, 4096)
			n, err := unix.Llistxattr(p, buf)
			if err != nil {
				return err
			}
			for _, name := range strings.Split(string(buf[:n]), "\x00") {
				if !strings.HasPrefix(name, overlayXattrPrefix) {
					continue
				}
				v, _ := getxattr(p, name)
				if name != opaqueXattr || v != "y" || !d.IsDir() {
					t.Errorf("%s: forged %s=%q", p, name, v)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	})
}
