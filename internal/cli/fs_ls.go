package cli

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func fsLsCmd() *command {
	depth := 1
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		args:    "ID PATH",
		short:   "List a directory",
		long: "List the entries of a directory in the sandbox; with --depth N, N levels deep (names\n" +
			"relative to PATH). Symlinks are shown as NAME -> TARGET and not descended into.",
		examples: []string{"warden fs ls sb-01hzx3k9q2 /home/user --depth 2"},
		json:     true,
	}
	c.flags = func(fs *flagSet) {
		fs.Int(&depth, "depth", "N", "how many levels to list (default 1: only the directory's own entries)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		if depth < 1 {
			return usageErr(c, "--depth must be at least 1")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		entries, err := cl.List(ctx, args[0], args[1], depth)
		if err != nil {
			return err
		}
		if r.g.json {
			if entries == nil {
				entries = []warden.Entry{}
			}
			return printJSON(r.env.Stdout, entries)
		}
		return writeEntryTable(r.env.Stdout, args[1], entries)
	}
	return c
}

// writeEntryTable writes directory entries like ls -l, names relative to dir.
func writeEntryTable(w io.Writer, dir string, entries []warden.Entry) error {
	t := newTable(w, "MODE", "OWNER", "GROUP", "SIZE", "MODIFIED", "NAME")
	for _, e := range entries {
		name := relName(dir, e)
		if e.Type == warden.EntrySymlink && e.SymlinkTarget != "" {
			name += " -> " + e.SymlinkTarget
		}
		t.row(modeString(e), orDash(e.Owner), orDash(e.Group), fmt.Sprint(e.Size), shortTime(e.ModifiedAt), name)
	}
	return t.flush()
}

// relName returns the entry's path relative to dir, or its name.
func relName(dir string, e warden.Entry) string {
	if e.Path == "" {
		return e.Name
	}
	d := path.Clean(dir)
	if d == "/" {
		return strings.TrimPrefix(e.Path, "/")
	}
	if rel, ok := strings.CutPrefix(e.Path, d+"/"); ok {
		return rel
	}
	return e.Name
}

// modeString writes an entry's type and permissions as ls -l does: drwxr-xr-x.
func modeString(e warden.Entry) string {
	m, err := e.FileMode()
	if err != nil {
		return "?" + e.Mode
	}
	kind := "-"
	switch e.Type {
	case warden.EntryDir:
		kind = "d"
	case warden.EntrySymlink:
		kind = "l"
	}
	perm := []byte(m.Perm().String()[1:])
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if perm[i] == 'x' {
			perm[i] = lower
		} else {
			perm[i] = upper
		}
	}
	special(2, hasBit(e.Mode, 0o4000), 's', 'S')
	special(5, hasBit(e.Mode, 0o2000), 's', 'S')
	special(8, hasBit(e.Mode, 0o1000), 't', 'T')
	return kind + string(perm)
}

// hasBit reports whether the octal mode string has bit set.
func hasBit(mode string, bit uint64) bool {
	var n uint64
	if _, err := fmt.Sscanf(mode, "%o", &n); err != nil {
		return false
	}
	return n&bit != 0
}
