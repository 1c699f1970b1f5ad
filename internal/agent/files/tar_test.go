package files

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTarRoundTrip(t *testing.T) {
	e := newEnv(t, Config{})
	src := e.h("src")
	e.write(filepath.Join(src, "a.txt"), "alpha", 0o644, testUID)
	e.write(filepath.Join(src, "empty"), "", 0o600, testUID)
	e.write(filepath.Join(src, "bin", "run.sh"), "#!/bin/sh\n", 0o750, testUID)
	e.write(filepath.Join(src, "sub", "deep", "z.txt"), strings.Repeat("z", 100000), 0o644, testUID)
	must(t, os.Mkdir(filepath.Join(src, "emptydir"), 0o700))
	must(t, os.Symlink("../a.txt", filepath.Join(src, "sub", "ln")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(src, "abs")))
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o644)) // skipped
	filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, testUID, testUID) })

	// GET /tar: names relative, symlinks as symlinks
	resp, body := e.do(e.h2, "GET", e.url("/tar", "path", "src"), nil)
	wantStatus(t, resp, body, 200)
	if resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	tr := tar.NewReader(bytes.NewReader(body))
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, hdr.Name)
		switch hdr.Name {
		case "sub/ln":
			if hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != "../a.txt" {
				t.Fatalf("symlink header %+v", hdr)
			}
		case "bin/run.sh":
			if hdr.Mode != 0o750 || hdr.Uname != "user" {
				t.Fatalf("file header %+v", hdr)
			}
		}
	}
	sort.Strings(names)
	want := []string{"a.txt", "abs", "bin/", "bin/run.sh", "empty", "emptydir/", "sub/", "sub/deep/", "sub/deep/z.txt", "sub/ln"}
	if !equal(names, want) {
		t.Fatalf("tar names %v, want %v", names, want)
	}

	// gzip on request
	resp, gzBody := e.do(e.h1, "GET", e.url("/tar", "path", "src"), nil, "Accept-Encoding", "gzip")
	wantStatus(t, resp, gzBody, 200)
	if resp.Header.Get("Content-Encoding") != "gzip" || gunzip(t, gzBody) != string(body) {
		t.Fatal("gzip tar differs")
	}

	// POST /tar into a new directory, as user
	resp, rb := e.do(e.h2, "POST", e.url("/tar", "path", "dst/here"), bytesReader(body), "Content-Type", "application/x-tar")
	wantStatus(t, resp, rb, 200)
	var res ExtractResult
	must(t, json.Unmarshal(rb, &res))
	if res.Path != e.h("dst", "here") || res.Entries != len(want) || res.Bytes != 5+10+100000 {
		t.Fatalf("result %+v", res)
	}
	dst := e.h("dst", "here")
	before, after := snapshot(t, src), snapshot(t, dst)
	delete(before, filepath.Join(src, "fifo"))
	for p, d := range before {
		q := filepath.Join(dst, strings.TrimPrefix(p, src))
		if p == src {
			continue
		}
		// the same type, mode, owner, content or link target
		if after[q] != d {
			t.Errorf("%s: %q, source %q", q, after[q], d)
		}
	}
	if len(after) != len(before) {
		t.Errorf("extracted %d paths, source has %d", len(after), len(before))
	}
	if uid, _ := owner(t, e.h("dst")); uid != testUID {
		t.Fatalf("created target owned by %d", uid)
	}

	// a gzip-compressed upload, detected by its magic
	resp, rb = e.do(e.h2, "POST", e.url("/tar", "path", "dst2"), bytesReader(gzBody))
	wantStatus(t, resp, rb, 200)
	if readFile(t, e.h("dst2", "sub", "deep", "z.txt")) != strings.Repeat("z", 100000) {
		t.Fatal("gzip extract")
	}

	// a single file
	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", "src/a.txt"), nil)
	wantStatus(t, resp, body, 200)
	tr = tar.NewReader(bytes.NewReader(body))
	hdr, err := tr.Next()
	must(t, err)
	if hdr.Name != "a.txt" || hdr.Size != 5 {
		t.Fatalf("single file header %+v", hdr)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("more than one entry: %v", err)
	}

	// a symlink given as the path is followed
	must(t, os.Symlink("src/a.txt", e.h("top-link")))
	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", "top-link"), nil)
	wantStatus(t, resp, body, 200)
	hdr, err = tar.NewReader(bytes.NewReader(body)).Next()
	must(t, err)
	if hdr.Name != "top-link" || hdr.Size != 5 {
		t.Fatalf("symlinked file header %+v", hdr)
	}
	e.write(e.p("root-only"), "x", 0o600, 0)
	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", e.p("root-only")), nil)
	wantStatus(t, resp, body, 403)

	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", "missing"), nil)
	wantStatus(t, resp, body, 404)
	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", "src/fifo"), nil)
	wantStatus(t, resp, body, 400)
	resp, body = e.do(e.h2, "POST", e.url("/tar", "path", "src/a.txt"), bytesReader(mkTar(t)))
	wantStatus(t, resp, body, 400)
}

// slipCase is a hostile archive: it must be refused (status 400 naming
// entry) or, with status 200, extracted with check passing; either way
// nothing may change outside the target.
type slipCase struct {
	name   string
	ents   func(outside string) []tarEnt
	status int
	entry  string // named in the error message
	check  func(t *testing.T, target string)
}

func slipCases() []slipCase {
	return []slipCase{
		{"dotdot", func(string) []tarEnt { return []tarEnt{{name: "../x", typ: tar.TypeReg, body: "x"}} }, 400, "../x", nil},
		{"dotdot-inner", func(string) []tarEnt { return []tarEnt{{name: "a/../../x", typ: tar.TypeReg, body: "x"}} }, 400, "a/../../x", nil},
		{"dotdot-dir", func(string) []tarEnt { return []tarEnt{{name: "../d/", typ: tar.TypeDir}} }, 400, "../d/", nil},
		{"absolute", func(o string) []tarEnt { return []tarEnt{{name: o + "/abs", typ: tar.TypeReg, body: "x"}} }, 400, "/abs", nil},
		{"absolute-etc", func(string) []tarEnt { return []tarEnt{{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}} }, 400, "/etc/passwd", nil},
		{"symlink-root", func(string) []tarEnt {
			return []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "/"}, {name: "l/etc/passwd", typ: tar.TypeReg, body: "pwned"}}
		}, 400, "l/etc/passwd", nil},
		{"symlink-root-outside", func(o string) []tarEnt {
			return []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "/"}, {name: "l" + o + "/pwned", typ: tar.TypeReg, body: "pwned"}}
		}, 400, "/pwned", nil},
		{"symlink-abs-dir", func(o string) []tarEnt {
			return []tarEnt{{name: "l", typ: tar.TypeSymlink, link: o}, {name: "l/pwned", typ: tar.TypeReg, body: "pwned"}}
		}, 400, "l/pwned", nil},
		{"symlink-dotdot", func(string) []tarEnt {
			return []tarEnt{{name: "up", typ: tar.TypeSymlink, link: ".."}, {name: "up/x", typ: tar.TypeReg, body: "x"}}
		}, 400, "up/x", nil},
		{"symlink-dotdot-nested", func(string) []tarEnt {
			return []tarEnt{{name: "a/b", typ: tar.TypeDir}, {name: "a/b/up", typ: tar.TypeSymlink, link: "../../.."}, {name: "a/b/up/outside/x", typ: tar.TypeReg, body: "x"}}
		}, 400, "a/b/up/outside/x", nil},
		{"symlink-dotdot-dir", func(string) []tarEnt {
			return []tarEnt{{name: "up", typ: tar.TypeSymlink, link: ".."}, {name: "up/newdir/", typ: tar.TypeDir}}
		}, 400, "up/newdir/", nil},
		{"symlink-then-link", func(string) []tarEnt {
			return []tarEnt{{name: "up", typ: tar.TypeSymlink, link: ".."}, {name: "up/hl", typ: tar.TypeLink, link: "f"}}
		}, 400, "up/hl", nil},
		{"symlink-dotdot-overwrite", func(string) []tarEnt {
			// a file entry over a symlink replaces the symlink, not its target
			return []tarEnt{{name: "s", typ: tar.TypeSymlink, link: "../outside/keep"}, {name: "s", typ: tar.TypeReg, body: "replaced"}}
		}, 200, "", func(t *testing.T, target string) {
			if readFile(t, filepath.Join(target, "s")) != "replaced" || modeOf(t, filepath.Join(target, "s"))&os.ModeSymlink != 0 {
				t.Fatal("symlink not replaced")
			}
		}},
		{"hardlink-etc-passwd", func(string) []tarEnt { return []tarEnt{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}} }, 400, `"h"`, nil},
		{"hardlink-outside", func(o string) []tarEnt { return []tarEnt{{name: "h", typ: tar.TypeLink, link: o + "/keep"}} }, 400, `"h"`, nil},
		{"hardlink-dotdot", func(string) []tarEnt { return []tarEnt{{name: "h", typ: tar.TypeLink, link: "../outside/keep"}} }, 400, `"h"`, nil},
		{"hardlink-via-symlink", func(string) []tarEnt {
			return []tarEnt{{name: "l", typ: tar.TypeSymlink, link: "/etc"}, {name: "h", typ: tar.TypeLink, link: "l/passwd"}}
		}, 400, `"h"`, nil},
		{"char-device", func(string) []tarEnt { return []tarEnt{{name: "null", typ: tar.TypeChar}} }, 400, "null", nil},
		{"block-device", func(string) []tarEnt { return []tarEnt{{name: "sda", typ: tar.TypeBlock}} }, 400, "sda", nil},
		{"fifo", func(string) []tarEnt { return []tarEnt{{name: "p", typ: tar.TypeFifo}} }, 400, `"p"`, nil},
		{"setuid", func(string) []tarEnt {
			return []tarEnt{
				{name: "suid", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh"},
				{name: "sgid", typ: tar.TypeReg, mode: 0o2755, body: "#!/bin/sh"},
				{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
			}
		}, 200, "", func(t *testing.T, target string) {
			for n, want := range map[string]os.FileMode{"suid": 0o755, "sgid": 0o755, "sticky": os.ModeDir | 0o777} {
				if got := modeOf(t, filepath.Join(target, n)); got != want {
					t.Errorf("%s: mode %v, want %v", n, got, want)
				}
			}
		}},
		{"good-then-bad", func(string) []tarEnt {
			return []tarEnt{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "../bad", typ: tar.TypeReg, body: "x"}}
		}, 400, "../bad", nil},
		{"inner-symlink-ok", func(string) []tarEnt {
			// symlinks inside the tree are fine to write through
			return []tarEnt{{name: "real/", typ: tar.TypeDir}, {name: "alias", typ: tar.TypeSymlink, link: "real"}, {name: "alias/f", typ: tar.TypeReg, body: "f"},
				{name: "hl", typ: tar.TypeLink, link: "alias/f"}}
		}, 200, "", func(t *testing.T, target string) {
			if readFile(t, filepath.Join(target, "real", "f")) != "f" || readFile(t, filepath.Join(target, "hl")) != "f" {
				t.Fatal("inner symlink")
			}
		}},
	}
}

func TestTarSlip(t *testing.T) {
	e := newEnv(t, Config{})
	outside := e.p("outside")
	e.write(filepath.Join(outside, "keep"), "keep", 0o666, testUID)
	must(t, os.Chmod(outside, 0o777))
	etcBefore := snapshot(t, "/etc/passwd")
	for _, u := range []string{"user", "root"} {
		must(t, os.MkdirAll(e.p("t", u), 0o777))
		must(t, os.Chmod(e.p("t", u), 0o777))
	}
	// as user (a bug could not hurt root's files) and as root
	for _, user := range []string{"user", "root"} {
		for _, c := range slipCases() {
			t.Run(user+"/"+c.name, func(t *testing.T) {
				target := e.p("t", user, c.name)
				ents := c.ents(outside)
				if user == "root" {
					// never aim root at the real /etc
					for j := range ents {
						ents[j].name = strings.Replace(ents[j].name, "/etc/passwd", outside+"/keep", 1)
						ents[j].link = strings.Replace(ents[j].link, "/etc/passwd", outside+"/keep", 1)
						if ents[j].link == "/etc" {
							ents[j].link = outside
						}
					}
				}
				before := snapshot(t, e.base)
				resp, body := e.do(e.h2, "POST", e.url("/tar", "path", target, "username", user), bytesReader(mkTar(t, ents...)))
				wantStatus(t, resp, body, c.status)
				entry := c.entry
				if user == "root" {
					entry = strings.Replace(entry, "/etc/passwd", outside+"/keep", 1)
				}
				if c.status != 200 {
					code, msg := jsonErr(t, body)
					if code != c.status || !strings.Contains(msg, entry) || !strings.HasPrefix(msg, "tar entry ") {
						t.Fatalf("error %d %q does not name %s", code, msg, entry)
					}
				}
				if d := diffSnapshots(before, snapshot(t, e.base), target); len(d) > 0 {
					t.Fatalf("changed outside the target: %v", d)
				}
				if c.check != nil {
					c.check(t, target)
				}
				// nothing special inside either
				filepath.Walk(target, func(p string, fi os.FileInfo, err error) error {
					if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe) != 0 {
						t.Errorf("special file extracted: %s %v", p, fi.Mode())
					}
					return nil
				})
			})
		}
	}
	if d := diffSnapshots(etcBefore, snapshot(t, "/etc/passwd"), ""); len(d) > 0 {
		t.Fatalf("/etc/passwd changed: %v", d)
	}
}

func TestTarLimits(t *testing.T) {
	e := newEnv(t, Config{MaxTarEntries: 3, MaxTarBytes: 10})
	resp, body := e.do(e.h2, "POST", e.url("/tar", "path", "lim"), bytesReader(mkTar(t,
		tarEnt{name: "a", typ: tar.TypeReg, body: "1"}, tarEnt{name: "b", typ: tar.TypeReg, body: "2"},
		tarEnt{name: "c", typ: tar.TypeReg, body: "3"}, tarEnt{name: "d", typ: tar.TypeReg, body: "4"})))
	wantStatus(t, resp, body, 400)
	if _, msg := jsonErr(t, body); !strings.Contains(msg, `"d"`) || !strings.Contains(msg, "more than 3 entries") {
		t.Fatalf("entry cap message %q", msg)
	}
	resp, body = e.do(e.h2, "POST", e.url("/tar", "path", "lim2"), bytesReader(mkTar(t,
		tarEnt{name: "a", typ: tar.TypeReg, body: "123456"}, tarEnt{name: "b", typ: tar.TypeReg, body: "123456"})))
	wantStatus(t, resp, body, 400)
	if _, msg := jsonErr(t, body); !strings.Contains(msg, `"b"`) || !strings.Contains(msg, "more than 10 bytes") {
		t.Fatalf("size cap message %q", msg)
	}
	if _, err := os.Lstat(e.h("lim2", "b")); !os.IsNotExist(err) {
		t.Fatal("over-limit entry written")
	}
	// garbage is a 400, not a panic
	resp, body = e.do(e.h2, "POST", e.url("/tar", "path", "lim3"), stringsReader(strings.Repeat("garbage!", 200)))
	wantStatus(t, resp, body, 400)
}

func TestTarNoSpace(t *testing.T) {
	e := newEnv(t, Config{})
	mountTmpfs(t, e.h("small"), "1m")
	resp, body := e.do(e.h2, "POST", e.url("/tar", "path", "small/x"), bytesReader(mkTar(t,
		tarEnt{name: "big", typ: tar.TypeReg, body: string(make([]byte, 2<<20))})))
	wantStatus(t, resp, body, 507)
}

func TestExtractDirect(t *testing.T) {
	// Extract on its own, with a cancelled context
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	must(t, err)
	defer root.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Extract(ctx, root, bytesReader(mkTar(t, tarEnt{name: "a", typ: tar.TypeReg, body: "1"})), Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled extract: %v", err)
	}
}
