package volume

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzPathBeneath: whatever path a caller sends, a lookup opens nothing
// outside the volume's root, and CleanPath's result has no "..", no
// leading slash and no empty component.
func FuzzPathBeneath(f *testing.F) {
	for _, s := range []string{"a", "/a/b", "../x", "a/../../x", "link/x", "dirlink/secret", "//a//b", ".", "./a",
		"a/./b", "root/etc/passwd", "a\x00b", "/", "", strings.Repeat("a/", 100) + "b", "...", "a/..", "link"} {
		f.Add(s)
	}
	root := f.TempDir()
	outside := f.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
	os.MkdirAll(filepath.Join(root, "a/b"), 0o755)
	os.WriteFile(filepath.Join(root, "a/b/file"), []byte("ok"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link"))
	os.Symlink(outside, filepath.Join(root, "dirlink"))
	os.Symlink("/", filepath.Join(root, "a/root"))
	f.Fuzz(func(t *testing.T, p string) {
		if rel, err := CleanPath(p); err == nil {
			if strings.HasPrefix(rel, "/") || rel == "" {
				t.Fatalf("CleanPath(%q) = %q", p, rel)
			}
			for _, c := range strings.Split(rel, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("CleanPath(%q) = %q", p, rel)
				}
			}
		}
		file, err := openBeneath(root, p)
		if err != nil {
			return
		}
		defer file.Close()
		real, err := os.Readlink("/proc/self/fd/" + itoa(int(file.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(real, root+"/") {
			t.Fatalf("%q opened %s, outside %s", p, real, root)
		}
		if b, _ := io.ReadAll(io.LimitReader(file, 64)); string(b) == "secret" {
			t.Fatalf("%q read the secret", p)
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
