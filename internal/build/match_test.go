package build

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// matchTree writes a build context with files, directories and symlinks,
// outside pointing where outside points (a host directory or a missing
// path), and returns it opened as a root.
func matchTree(t testing.TB, outside string) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"sub", "sub/deep", "dir.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a.txt", "b.txt", "sub/c.txt", "sub/d.md", "sub/deep/e.txt", "dir.d/f", "[x]", "mypasswd"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"out":       outside,                        // absolute, out of the context
		"rel":       "../../../../../../" + outside, // relative, out of the context
		"sub/up":    "../../" + filepath.Base(dir) + "/sub",
		"in":        "sub",
		"self":      ".",
		"sub/outer": outside,
		"dangling":  "nowhere",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return dir, root
}

func TestMatchContext(t *testing.T) {
	_, root := matchTree(t, "/etc")
	cases := []struct {
		src  string
		want string // matches, or the error
	}{
		{"a.txt", "[a.txt]"},
		{"./sub/../a.txt", "[a.txt]"},
		{"/a.txt", "[a.txt]"},
		{".", "[.]"},
		{"sub/", "[sub]"},
		{"*.txt", "[a.txt b.txt]"},
		{"sub/*", "[sub/c.txt sub/d.md sub/deep sub/outer sub/up]"},
		{"sub/*/e.txt", "[sub/deep/e.txt]"},
		{"in/*.txt", "[in/c.txt]"},
		{"*/c.txt", "[in/c.txt sub/c.txt]"},
		{"self/*.txt", "[self/a.txt self/b.txt]"},
		{"?.txt", "[a.txt b.txt]"},
		{"[ab].txt", "[a.txt b.txt]"},
		{`\[x]`, "[[x]]"},
		{"ou*", "[out]"}, // the link itself, not what it points at
		{"dangl*", "[dangling]"},
		{"dangling", "[dangling]"},
		{"my*", "[mypasswd]"}, // the context's own file
		{"*/my*", "[self/mypasswd]"},
		// Nothing is found through a link that leaves the context.
		{"out/pass*", errNoMatch.Error()},
		{"out/passwd", errNoMatch.Error()},
		{"out/*/x", errNoMatch.Error()},
		{"out/*", errNoMatch.Error()},
		{"rel/pass*", errNoMatch.Error()},
		{"rel/passwd", errNoMatch.Error()},
		{"sub/outer/pass*", errNoMatch.Error()},
		{"*/passwd", errNoMatch.Error()},
		{"*/pass*", errNoMatch.Error()},
		{"dangling/*", errNoMatch.Error()},
		{"missing", errNoMatch.Error()},
		{"*.nothing", errNoMatch.Error()},
		{"../x", errOutside.Error()},
		{"..", errOutside.Error()},
		{"a/../../x", errOutside.Error()},
		{"[", `bad pattern "[": syntax error in pattern`},
		{"sub/[a-", `bad pattern "sub/[a-": syntax error in pattern`},
	}
	for _, c := range cases {
		m, err := matchContext(root, c.src)
		got := fmt.Sprint(m)
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("matchContext(%q) = %s, want %s", c.src, got, c.want)
		}
	}
}

// TestMatchContextNoOracle: whether what a link leaving the context points
// at exists on the host changes no answer, and no answer names a host file.
func TestMatchContextNoOracle(t *testing.T) {
	_, hostRoot := matchTree(t, "/etc")
	_, noneRoot := matchTree(t, "/nonexistent-warden-match-test")
	for _, src := range []string{"out/pass*", "out/passwd", "out/*/x", "out/*", "out/", "out/.", "rel/pass*", "rel/*",
		"*/passwd", "*/pass*", "*/*/shadow", "sub/outer/pass*", "sub/outer/*", "o*/p*", "out/ssh/*", "out/*.conf"} {
		m1, e1 := matchContext(hostRoot, src)
		m2, e2 := matchContext(noneRoot, src)
		if fmt.Sprint(m1, e1) != fmt.Sprint(m2, e2) {
			t.Errorf("%q: %v %v with the host /etc, %v %v with a missing target", src, m1, e1, m2, e2)
		}
		for _, p := range m1 {
			if strings.Contains(p, "/pass") || strings.Contains(p, "shadow") || strings.HasSuffix(p, ".conf") {
				t.Errorf("%q matched %q, a host file", src, p)
			}
		}
	}
}

// TestMatchContextBounded: links to the context's own directories cannot
// make a short pattern walk without end.
func TestMatchContextBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 30 {
		if err := os.Symlink(".", filepath.Join(dir, fmt.Sprintf("l%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	defer func(n int) { maxGlobPaths = n }(maxGlobPaths)
	maxGlobPaths = 2000
	// 30^5 paths if nothing stopped it.
	if _, err := matchContext(root, "*/*/*/*/*"); !errors.Is(err, errTooMany) {
		t.Fatalf("self-linked context: %v, want %v", err, errTooMany)
	}
	if m, err := matchContext(root, "l0*/l00"); err != nil || len(m) != 10 {
		t.Fatalf("small match in the same context: %v %v", m, err)
	}
}
