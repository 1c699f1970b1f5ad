package build

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// maxGlobPaths bounds the paths one COPY/ADD glob may visit (directories
// walked on the way and matches), so a context full of symlinks to its own
// directories cannot make a short pattern expand without end. A variable
// for tests.
var maxGlobPaths = 100_000

var (
	// errNoMatch is the one answer for a source that names nothing in the
	// context: missing, behind a symlink that leaves the context, or
	// unreadable. It never says which, nor names what a glob saw.
	errNoMatch = errors.New("no file in the build context matches")
	// errOutside refuses a source that leaves the context by its text.
	errOutside = errors.New("source is outside the build context")
	// errTooMany refuses a glob that visits more than maxGlobPaths paths.
	errTooMany = errors.New("the pattern matches too many paths in the build context")
)

// cleanSource returns a COPY source as a clean path relative to the context
// root ("." for the root itself), refusing one whose text leaves it.
func cleanSource(src string) (string, error) {
	if c := path.Clean(src); c == ".." || strings.HasPrefix(c, "../") {
		return "", errOutside
	}
	clean := path.Clean("/" + src)[1:]
	if clean == "" {
		clean = "."
	}
	return clean, nil
}

// hasMeta reports whether a source is a glob (a backslash alone is not: it
// only escapes inside one).
func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[") }

// matchContext returns the context paths (relative, clean, sorted) a COPY
// source names: a path or a glob. Everything is resolved inside root, the
// build context: a symlink on the way is followed only while it stays in
// the context (os.Root's rules), and one that leaves it leads nowhere, so
// the answer never depends on, and never names, anything outside the
// context. The last component is not followed (a matched symlink is copied
// as a symlink).
func matchContext(root *os.Root, src string) ([]string, error) {
	clean, err := cleanSource(src)
	if err != nil {
		return nil, err
	}
	if !hasMeta(clean) {
		if _, err := root.Lstat(clean); err != nil {
			return nil, errNoMatch
		}
		return []string{clean}, nil
	}
	parts := strings.Split(clean, "/")
	for _, p := range parts {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("bad pattern %q: %w", src, err)
		}
	}
	cands := []string{"."}
	visited := 0
	for i, part := range parts {
		last := i == len(parts)-1
		var next []string
		glob := hasMeta(part)
		for _, dir := range cands {
			names := []string{part}
			if glob {
				names = readDirNames(root, dir)
			}
			for _, name := range names {
				if ok, _ := path.Match(part, name); glob && !ok {
					continue
				}
				p := path.Join(dir, name)
				if visited++; visited > maxGlobPaths {
					return nil, fmt.Errorf("%w (more than %d)", errTooMany, maxGlobPaths)
				}
				if last {
					if _, err := root.Lstat(p); err == nil {
						next = append(next, p)
					}
				} else if fi, err := root.Stat(p); err == nil && fi.IsDir() {
					next = append(next, p)
				}
			}
		}
		cands = next
		if len(cands) == 0 {
			return nil, errNoMatch
		}
	}
	slices.Sort(cands)
	return slices.Compact(cands), nil
}

// readDirNames lists a context directory through root; anything it cannot
// list (not there, not a directory, reached through a symlink leaving the
// context) has no entries.
func readDirNames(root *os.Root, dir string) []string {
	ents, err := fs.ReadDir(root.FS(), dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
