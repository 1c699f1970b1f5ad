package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name string
	typ  byte
	body string
	link string
	mode int64
}

func makeTar(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func file(name, body string) tarEntry { return tarEntry{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) tarEntry        { return tarEntry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeSymlink, link: target}
}
func hardlink(name, target string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeLink, link: target}
}

// TestExtractTarSlip feeds archives that try to write outside the destination. Each must
// fail naming the entry, and nothing may appear outside the destination.
func TestExtractTarSlip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		// pre prepares the destination (dst) and the outside directory before extraction.
		pre  func(t *testing.T, dst, outside string)
		want string // in the error
	}{
		{name: "dotdot", entries: []tarEntry{file("../x", "pwned")}, want: `".."`},
		{name: "dotdot inside name", entries: []tarEntry{file("a/../../x", "pwned")}, want: `".."`},
		{name: "dotdot that cleans inside", entries: []tarEntry{file("a/../x", "pwned")}, want: `".."`},
		{name: "absolute", entries: []tarEntry{file("/tmp/x", "pwned")}, want: "absolute"},
		{name: "absolute dir", entries: []tarEntry{dir("/etc/")}, want: "absolute"},
		{name: "backslash dotdot", entries: []tarEntry{file(`..\x`, "pwned")}, want: `".."`},
		{name: "empty name", entries: []tarEntry{file("", "pwned")}, want: "empty name"},
		{name: "symlink escape, absolute target", entries: []tarEntry{
			symlink("evil", "OUTSIDE"), file("evil/x", "pwned"),
		}, want: `"evil/x"`},
		{name: "symlink escape, relative target", entries: []tarEntry{
			dir("a/"), symlink("a/up", "../../OUTSIDE_REL"), file("a/up/x", "pwned"),
		}, want: `"a/up/x"`},
		{name: "symlink then overwrite through it", entries: []tarEntry{
			symlink("f", "OUTSIDE/victim"), dir("f/"),
		}, want: `"f/"`},
		{name: "symlink escape, nested", entries: []tarEntry{
			symlink("evil", "OUTSIDE"), dir("evil/sub/"),
		}, want: `"evil/sub/"`},
		{name: "hardlink escape, dotdot", entries: []tarEntry{hardlink("h", "../victim")}, want: `".."`},
		{name: "hardlink escape, absolute", entries: []tarEntry{hardlink("h", "OUTSIDE/victim")}, want: "absolute"},
		{name: "hardlink through symlink", entries: []tarEntry{
			symlink("evil", "OUTSIDE"), hardlink("h", "evil/victim"),
		}, want: `"h"`},
		{name: "hardlink to missing", entries: []tarEntry{hardlink("h", "nope")}, want: `"h"`},
		{name: "existing symlink in destination", entries: []tarEntry{file("pre/x", "pwned")},
			pre: func(t *testing.T, dst, outside string) {
				if err := os.Symlink(outside, filepath.Join(dst, "pre")); err != nil {
					t.Fatal(err)
				}
			}, want: `"pre/x"`},
		{name: "existing symlink to a file outside is replaced, not followed", entries: []tarEntry{file("link", "new")},
			pre: func(t *testing.T, dst, outside string) {
				if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dst, "link")); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			outside := filepath.Join(base, "outside")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			for i, e := range tc.entries {
				e.name = strings.ReplaceAll(e.name, "OUTSIDE", outside)
				e.link = strings.ReplaceAll(e.link, "OUTSIDE", outside)
				tc.entries[i] = e
			}
			if tc.pre != nil {
				tc.pre(t, dst, outside)
			}

			err := extractTar(context.Background(), makeTar(t, tc.entries...), dst, extractOptions{})
			if tc.want != "" {
				var ee *entryError
				if err == nil || !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want an entry error containing %s", err, tc.want)
				}
			} else if err != nil {
				t.Fatal(err)
			}

			// Nothing outside changed.
			if b, _ := os.ReadFile(victim); string(b) != "original" {
				t.Errorf("victim outside the destination was changed: %q", b)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("outside directory gained entries: %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(base, "x")); err == nil {
				t.Error("file written next to the destination")
			}
			if _, err := os.Lstat(filepath.Join(base, "OUTSIDE_REL")); err == nil {
				t.Error("directory written next to the destination")
			}
		})
	}
}

func TestExtractTar(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "new", "dst") // created with parents
	archive := makeTar(t,
		dir("./"),
		file("a.txt", "hello"),
		dir("sub/"),
		tarEntry{name: "sub/run", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o4755},
		tarEntry{name: "ro", typ: tar.TypeDir, mode: 0o555},
		file("ro/f", "read-only dir"),
		file("deep/er/f", "parents made"),
		symlink("py", "/usr/bin/python3"),
		symlink("sub/up", "../a.txt"),
		hardlink("hard", "a.txt"),
		tarEntry{name: "fifo", typ: tar.TypeFifo},
		file("a.txt", "replaced"),
	)
	var warnings []string
	warn := func(f string, a ...any) { warnings = append(warnings, f) }
	if err := extractTar(context.Background(), archive, dst, extractOptions{warn: warn}); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	if got := read("a.txt"); got != "replaced" {
		t.Errorf("a.txt = %q", got)
	}
	if got := read("hard"); got != "hello" {
		t.Errorf("hard = %q (hardlink to the first a.txt)", got)
	}
	if got := read("ro/f"); got != "read-only dir" {
		t.Errorf("ro/f = %q", got)
	}
	if got := read("deep/er/f"); got != "parents made" {
		t.Errorf("deep/er/f = %q", got)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "py")); l != "/usr/bin/python3" {
		t.Errorf("py -> %q: symlinks are kept as stored", l)
	}
	if got := read("sub/up"); got != "replaced" {
		t.Errorf("sub/up = %q", got)
	}
	st, err := os.Stat(filepath.Join(dst, "sub/run"))
	if err != nil || st.Mode() != 0o755 {
		t.Errorf("sub/run mode %v, %v: setuid must be dropped", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(dst, "ro"))
	if err != nil || st.Mode().Perm() != 0o555 {
		t.Errorf("ro mode %v, %v: directory modes are applied at the end", st.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("fifo should be skipped: %v", err)
	}
	if len(warnings) != 1 {
		t.Errorf("warnings: %q", warnings)
	}
	os.Chmod(filepath.Join(dst, "ro"), 0o755) // let t.TempDir clean up
}

func TestWriteTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
	os.MkdirAll(filepath.Join(src, "sub", "empty"), 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o640)
	os.WriteFile(filepath.Join(src, "sub", "run"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "link-out"))
	os.Symlink(outside, filepath.Join(src, "dir-out"))

	var buf bytes.Buffer
	if err := writeTar(context.Background(), &buf, src, nil); err != nil {
		t.Fatal(err)
	}
	// Names are relative, directories end in "/", symlinks are not followed.
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
		if strings.HasPrefix(hdr.Name, "/") || strings.Contains(hdr.Name, "..") {
			t.Errorf("unsafe name %q", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeReg {
			if b := readAll(t, tr); strings.Contains(string(b), "secret") {
				t.Errorf("%s: content from outside the source", hdr.Name)
			}
		}
	}
	want := "a.txt dir-out link-out sub/ sub/empty/ sub/run"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("names %q, want %q", got, want)
	}

	dst := t.TempDir()
	if err := extractTar(context.Background(), &buf, dst, extractOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "hello" {
		t.Errorf("a.txt = %q", b)
	}
	if st, _ := os.Stat(filepath.Join(dst, "a.txt")); st.Mode().Perm() != 0o640 {
		t.Errorf("a.txt mode %v", st.Mode())
	}
	if st, _ := os.Stat(filepath.Join(dst, "sub", "run")); st.Mode().Perm() != 0o755 {
		t.Errorf("sub/run mode %v", st.Mode())
	}
	if st, err := os.Stat(filepath.Join(dst, "sub", "empty")); err != nil || !st.IsDir() {
		t.Errorf("sub/empty: %v", err)
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"a": "a", "a/b/": "a/b", "./a": "a", ".": ".", "./": ".", "a//b": "a/b", "a/./b": "a/b",
	} {
		if got, err := cleanName(in); err != nil || got != want {
			t.Errorf("cleanName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/a", "..", "../a", "a/..", "a/../b", `\a`, `a\..\b`, "a\x00b"} {
		if _, err := cleanName(bad); err == nil {
			t.Errorf("cleanName(%q) should fail", bad)
		}
	}
}
