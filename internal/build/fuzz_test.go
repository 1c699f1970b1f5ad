package build

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzMatchContext matches arbitrary COPY sources in a context whose links
// lead out of it (to the host /etc in one copy, to a missing path in the
// other) and checks that no match resolves outside the context, that the
// two copies give the same answer (no existence oracle), and that errors
// are only the matcher's own.
func FuzzMatchContext(f *testing.F) {
	for _, s := range []string{
		"a.txt", "*.txt", "sub/*", "sub/*/e.txt", "in/*.txt", "*/c.txt", "self/self/*", "out/pass*",
		"out/*/x", "rel/*", "*/passwd", "sub/outer/*", "sub/up/*", "../x", "[", `\[x]`, "/*", "./*/../*",
		"*/*/*", "dangling/*", "[!a]*", "?", "",
	} {
		f.Add(s)
	}
	hostDir, hostRoot := matchTree(f, "/etc")
	_, noneRoot := matchTree(f, "/nonexistent-warden-fuzz")
	real, err := filepath.EvalSymlinks(hostDir)
	if err != nil {
		f.Fatal(err)
	}
	defer func(n int) { maxGlobPaths = n }(maxGlobPaths)
	maxGlobPaths = 2000 // keeps each run short; the bound itself is tested too
	f.Fuzz(func(t *testing.T, src string) {
		m, err := matchContext(hostRoot, src)
		m2, err2 := matchContext(noneRoot, src)
		if fmt.Sprint(m, err) != fmt.Sprint(m2, err2) {
			t.Fatalf("%q: %v %v where the outside exists, %v %v where it does not", src, m, err, m2, err2)
		}
		if err != nil {
			if !errors.Is(err, errNoMatch) && !errors.Is(err, errOutside) && !errors.Is(err, errTooMany) &&
				!errors.Is(err, path.ErrBadPattern) {
				t.Fatalf("%q: unexpected error %v", src, err)
			}
			return
		}
		if len(m) == 0 {
			t.Fatalf("%q: no match and no error", src)
		}
		for _, p := range m {
			if p != path.Clean(p) || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("%q matched %q, not a clean path in the context", src, p)
			}
			if _, err := hostRoot.Lstat(p); err != nil {
				t.Fatalf("%q matched %q, which the context does not hold: %v", src, p, err)
			}
			// Where the match lies: its directory, links resolved, and
			// the match itself (not followed) must be in the context.
			parent, err := filepath.EvalSymlinks(filepath.Join(hostDir, filepath.Dir(p)))
			if err != nil {
				t.Fatalf("%q matched %q, whose directory does not resolve: %v", src, p, err)
			}
			if parent != real && !strings.HasPrefix(parent, real+"/") {
				t.Fatalf("%q matched %q, which lies in %s, outside the context %s", src, p, parent, real)
			}
		}
	})
}
