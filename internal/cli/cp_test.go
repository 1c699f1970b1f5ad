package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// fakeFS serves the file endpoints of the API from one local directory per sandbox, which
// stands for the sandbox's "/".
type fakeFS struct {
	*fakeDaemon
	roots map[string]string // sandbox ID -> directory
	modes map[string]string // "ID:path" -> mode query of the last PUT
}

func newFakeFS(t *testing.T, ids ...string) *fakeFS {
	f := &fakeFS{fakeDaemon: newFakeDaemon(t), roots: map[string]string{}, modes: map[string]string{}}
	for _, id := range ids {
		f.roots[id] = t.TempDir()
	}
	local := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		root, ok := f.roots[r.PathValue("id")]
		p := r.URL.Query().Get("path")
		if !ok || !strings.HasPrefix(p, "/") {
			writeJSON(w, 400, map[string]any{"error": map[string]string{"code": "bad_request", "message": "bad sandbox or path"}})
			return "", false
		}
		return filepath.Join(root, filepath.FromSlash(p)), true
	}
	notFound := func(w http.ResponseWriter, err error) {
		writeJSON(w, 404, map[string]any{"error": map[string]string{"code": "not_found", "message": err.Error()}})
	}
	f.handle("GET /v1/sandboxes/{id}/fs/stat", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		st, err := os.Lstat(p)
		if err != nil {
			notFound(w, err)
			return
		}
		writeJSON(w, 200, entryOf(r.URL.Query().Get("path"), st))
	})
	f.handle("GET /v1/sandboxes/{id}/fs/list", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			writeJSON(w, 400, map[string]any{"error": map[string]string{"code": "bad_request", "message": "not a directory"}})
			return
		}
		writeJSON(w, 200, map[string]any{"entries": []warden.Entry{}})
	})
	f.handle("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		b, err := os.ReadFile(p)
		if err != nil {
			notFound(w, err)
			return
		}
		w.Write(b)
	})
	f.handle("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		mode := fs.FileMode(0o644)
		if m := r.URL.Query().Get("mode"); m != "" {
			n, _ := strconv.ParseUint(m, 8, 32)
			mode = fs.FileMode(n)
			f.modes[r.PathValue("id")+":"+r.URL.Query().Get("path")] = m
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, _ := io.ReadAll(r.Body)
		if err := os.WriteFile(p, b, mode); err != nil {
			writeJSON(w, 409, map[string]any{"error": map[string]string{"code": "conflict", "message": err.Error()}})
			return
		}
		st, _ := os.Lstat(p)
		writeJSON(w, 200, entryOf(r.URL.Query().Get("path"), st))
	})
	f.handle("GET /v1/sandboxes/{id}/archive", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		if _, err := os.Stat(p); err != nil {
			notFound(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		writeTar(r.Context(), w, p, nil)
	})
	f.handle("PUT /v1/sandboxes/{id}/archive", func(w http.ResponseWriter, r *http.Request) {
		p, ok := local(w, r)
		if !ok {
			return
		}
		if err := extractTar(r.Context(), r.Body, p, extractOptions{}); err != nil {
			writeJSON(w, 400, map[string]any{"error": map[string]string{"code": "bad_request", "message": err.Error()}})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return f
}

func entryOf(p string, st fs.FileInfo) warden.Entry {
	typ := warden.EntryFile
	switch {
	case st.IsDir():
		typ = warden.EntryDir
	case st.Mode()&fs.ModeSymlink != 0:
		typ = warden.EntrySymlink
	}
	return warden.Entry{Name: st.Name(), Path: p, Type: typ, Size: st.Size(), Mode: fmt.Sprintf("%04o", st.Mode().Perm())}
}

// in returns the local path of p in sandbox id.
func (f *fakeFS) in(id, p string) string { return filepath.Join(f.roots[id], filepath.FromSlash(p)) }

func writeFiles(t *testing.T, base string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(base, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func checkFile(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if string(b) != want {
		t.Errorf("%s = %q, want %q", p, b, want)
	}
}

func TestCpUpload(t *testing.T) {
	f := newFakeFS(t, "sb-1")
	local := t.TempDir()
	writeFiles(t, local, map[string]string{"a.txt": "A", "proj/main.py": "print(1)", "proj/lib/x.py": "x"})
	os.Chmod(filepath.Join(local, "a.txt"), 0o600)
	os.Symlink("main.py", filepath.Join(local, "proj", "link"))
	writeFiles(t, f.roots["sb-1"], map[string]string{"home/user/": "", "home/user/existing/": ""})
	cd := func(p string) string { return filepath.Join(local, p) }

	for _, tc := range []struct {
		args  []string
		check func(t *testing.T)
	}{
		{[]string{cd("a.txt"), "sb-1:/home/user"}, func(t *testing.T) {
			checkFile(t, f.in("sb-1", "/home/user/a.txt"), "A")
			if m := f.modes["sb-1:/home/user/a.txt"]; m != "0600" {
				t.Errorf("mode sent %q, want 0600", m)
			}
		}},
		{[]string{cd("a.txt"), "sb-1:/new/dir/"}, func(t *testing.T) { checkFile(t, f.in("sb-1", "/new/dir/a.txt"), "A") }},
		{[]string{cd("a.txt"), "sb-1:/home/user/b.txt"}, func(t *testing.T) { checkFile(t, f.in("sb-1", "/home/user/b.txt"), "A") }},
		{[]string{cd("proj"), "sb-1:/app"}, func(t *testing.T) {
			checkFile(t, f.in("sb-1", "/app/main.py"), "print(1)")
			checkFile(t, f.in("sb-1", "/app/lib/x.py"), "x")
			if l, _ := os.Readlink(f.in("sb-1", "/app/link")); l != "main.py" {
				t.Errorf("symlink copied as %q", l)
			}
		}},
		{[]string{cd("proj"), "sb-1:/home/user/existing"}, func(t *testing.T) {
			checkFile(t, f.in("sb-1", "/home/user/existing/proj/main.py"), "print(1)")
		}},
		{[]string{cd("proj") + "/.", "sb-1:/home/user/existing"}, func(t *testing.T) {
			checkFile(t, f.in("sb-1", "/home/user/existing/main.py"), "print(1)")
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := run(t, f.fakeDaemon, append([]string{"cp"}, tc.args...)...)
			if res.code != 0 || res.stdout != "" || res.stderr != "" {
				t.Fatalf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
			}
			tc.check(t)
		})
	}

	res := runIn(t, f.fakeDaemon, "from stdin", "cp", "-", "sb-1:/home/user/in.txt")
	if res.code != 0 {
		t.Fatalf("cp - : %s", res.stderr)
	}
	checkFile(t, f.in("sb-1", "/home/user/in.txt"), "from stdin")

	var tarball bytes.Buffer
	writeTar(context.Background(), &tarball, filepath.Join(local, "proj"), nil)
	res = runIn(t, f.fakeDaemon, tarball.String(), "cp", "--tar", "-", "sb-1:/untarred")
	if res.code != 0 {
		t.Fatalf("cp --tar - : %s", res.stderr)
	}
	checkFile(t, f.in("sb-1", "/untarred/lib/x.py"), "x")

	res = run(t, f.fakeDaemon, "cp", cd("proj"), "sb-1:/home/user/a.txt")
	if res.code != 1 || !strings.Contains(res.stderr, "cannot copy a directory onto sb-1:/home/user/a.txt, which is not a directory") {
		t.Errorf("directory onto file: code %d stderr %q", res.code, res.stderr)
	}
	res = run(t, f.fakeDaemon, "cp", cd("missing"), "sb-1:/x")
	if res.code != 1 || !strings.Contains(res.stderr, "no such file or directory") {
		t.Errorf("missing source: code %d stderr %q", res.code, res.stderr)
	}
}

func TestCpDownload(t *testing.T) {
	f := newFakeFS(t, "sb-1")
	writeFiles(t, f.roots["sb-1"], map[string]string{"etc/os-release": "ID=debian\n", "app/main.py": "print(1)", "app/lib/x.py": "x"})
	os.Chmod(f.in("sb-1", "/etc/os-release"), 0o640)
	os.Symlink("app", f.in("sb-1", "/applink")) // relative: the fake has no chroot
	local := t.TempDir()
	os.Mkdir(filepath.Join(local, "existing"), 0o755)
	at := func(p string) string { return filepath.Join(local, p) }

	for _, tc := range []struct {
		args  []string
		check func(t *testing.T)
	}{
		{[]string{"sb-1:/etc/os-release", at("existing")}, func(t *testing.T) {
			checkFile(t, at("existing/os-release"), "ID=debian\n")
			if st, _ := os.Stat(at("existing/os-release")); st.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640", st.Mode())
			}
		}},
		{[]string{"sb-1:/etc/os-release", at("renamed")}, func(t *testing.T) { checkFile(t, at("renamed"), "ID=debian\n") }},
		{[]string{"sb-1:/app", at("newdir")}, func(t *testing.T) {
			checkFile(t, at("newdir/main.py"), "print(1)")
			checkFile(t, at("newdir/lib/x.py"), "x")
		}},
		{[]string{"sb-1:/app", at("existing")}, func(t *testing.T) { checkFile(t, at("existing/app/lib/x.py"), "x") }},
		{[]string{"sb-1:/app/.", at("existing")}, func(t *testing.T) { checkFile(t, at("existing/main.py"), "print(1)") }},
		{[]string{"sb-1:/applink", at("vialink")}, func(t *testing.T) { checkFile(t, at("vialink/main.py"), "print(1)") }},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := run(t, f.fakeDaemon, append([]string{"cp"}, tc.args...)...)
			if res.code != 0 || res.stdout != "" || res.stderr != "" {
				t.Fatalf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
			}
			tc.check(t)
		})
	}

	res := run(t, f.fakeDaemon, "cp", "sb-1:/etc/os-release", "-")
	if res.code != 0 || res.stdout != "ID=debian\n" {
		t.Errorf("file to stdout: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	res = run(t, f.fakeDaemon, "cp", "sb-1:/app", "-")
	tr := tar.NewReader(strings.NewReader(res.stdout))
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if res.code != 0 || strings.Join(names, " ") != "lib/ lib/x.py main.py" {
		t.Errorf("directory to stdout: code %d names %q stderr %q", res.code, names, res.stderr)
	}
	res = run(t, f.fakeDaemon, "cp", "sb-1:/nope", at("x"))
	if res.code != 1 || !strings.Contains(res.stderr, "not_found") {
		t.Errorf("missing remote: code %d stderr %q", res.code, res.stderr)
	}
	res = run(t, f.fakeDaemon, "cp", "sb-1:/app", at("renamed"))
	if res.code != 1 || !strings.Contains(res.stderr, "which is not a directory") {
		t.Errorf("directory onto file: code %d stderr %q", res.code, res.stderr)
	}
}

func TestCpBetweenSandboxes(t *testing.T) {
	f := newFakeFS(t, "sb-1", "sb-2")
	writeFiles(t, f.roots["sb-1"], map[string]string{"a.txt": "A", "dir/b.txt": "B"})
	writeFiles(t, f.roots["sb-2"], map[string]string{"dst/": ""})
	for _, args := range [][]string{{"sb-1:/a.txt", "sb-2:/dst"}, {"sb-1:/dir", "sb-2:/dst"}} {
		if res := run(t, f.fakeDaemon, append([]string{"cp"}, args...)...); res.code != 0 {
			t.Fatalf("%q: %s", args, res.stderr)
		}
	}
	checkFile(t, f.in("sb-2", "/dst/a.txt"), "A")
	checkFile(t, f.in("sb-2", "/dst/dir/b.txt"), "B")
}

// TestCpRefusesEscapingArchive downloads a directory whose archive tries to write outside
// the destination: cp fails and nothing lands outside.
func TestCpRefusesEscapingArchive(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/sandboxes/sb-1/fs/stat", 200, warden.Entry{Name: "app", Path: "/app", Type: "dir", Mode: "0755"})
	d.handle("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Write(makeTar(t, file("ok.txt", "fine"), file("../escaped.txt", "pwned")).Bytes())
	})
	base := t.TempDir()
	res := run(t, d, "cp", "sb-1:/app", filepath.Join(base, "out"))
	if res.code != 1 || !strings.Contains(res.stderr, `archive entry "../escaped.txt": name contains ".."`) {
		t.Errorf("code %d stderr %q", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "escaped.txt")); err == nil {
		t.Error("escaped.txt was written outside the destination")
	}
}
