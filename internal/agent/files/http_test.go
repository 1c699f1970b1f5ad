package files

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

func jsonErr(t *testing.T, body []byte) (int, string) {
	t.Helper()
	var v struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return v.Code, v.Message
}

func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	must(t, err)
	out, err := io.ReadAll(zr)
	must(t, err)
	return string(out)
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	must(t, w.Close())
	return b.Bytes()
}

func TestReadFile(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(e.h("r.txt"), "0123456789", 0o644, testUID)
	e.write(e.h("empty"), "", 0o644, testUID)
	must(t, unix.Mkfifo(e.h("fifo"), 0o666))
	must(t, os.Lchown(e.h("fifo"), testUID, testUID))

	for _, c := range []*http.Client{e.h2, e.h1} {
		resp, body := e.do(c, "GET", e.url("/files", "path", "r.txt"), nil)
		wantStatus(t, resp, body, 200)
		if want := map[*http.Client]int{e.h2: 2, e.h1: 1}[c]; resp.ProtoMajor != want {
			t.Fatalf("HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
		}
		if string(body) != "0123456789" || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("read %q %v", body, resp.Header)
		}

		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Range", "bytes=2-5")
		wantStatus(t, resp, body, 206)
		if string(body) != "2345" || resp.Header.Get("Content-Range") != "bytes 2-5/10" {
			t.Fatalf("range %q %v", body, resp.Header)
		}
		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Range", "bytes=-3")
		wantStatus(t, resp, body, 206)
		if string(body) != "789" {
			t.Fatalf("suffix range %q", body)
		}

		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Accept-Encoding", "gzip")
		wantStatus(t, resp, body, 200)
		if resp.Header.Get("Content-Encoding") != "gzip" || gunzip(t, body) != "0123456789" {
			t.Fatalf("gzip %v", resp.Header)
		}
		// a range request prefers identity, so the range works
		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Accept-Encoding", "gzip, identity", "Range", "bytes=0-1")
		wantStatus(t, resp, body, 206)
		if string(body) != "01" {
			t.Fatalf("range+gzip %q", body)
		}

		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Accept-Encoding", "br")
		wantStatus(t, resp, body, 406)
		if code, msg := jsonErr(t, body); code != 406 || msg != "no acceptable encoding found, supported: [identity, gzip]" {
			t.Fatalf("406 body %d %q", code, msg)
		}
		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Accept-Encoding", "gzip;q=0, identity;q=0")
		wantStatus(t, resp, body, 406)
		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt"), nil, "Accept-Encoding", "br, identity;q=0.5")
		wantStatus(t, resp, body, 200)
		if resp.Header.Get("Content-Encoding") != "" || string(body) != "0123456789" {
			t.Fatalf("identity fallback %v %q", resp.Header, body)
		}

		for _, ae := range []string{"", "gzip"} {
			resp, body = e.do(c, "GET", e.url("/files", "path", "empty"), nil, "Accept-Encoding", ae)
			wantStatus(t, resp, body, 200)
			if resp.Header.Get("Content-Length") != "0" || len(body) != 0 {
				t.Fatalf("empty file (accept %q): %v %q", ae, resp.Header, body)
			}
		}

		resp, body = e.do(c, "HEAD", e.url("/files", "path", "r.txt"), nil)
		wantStatus(t, resp, body, 200)
		if resp.Header.Get("Content-Length") != "10" || len(body) != 0 {
			t.Fatalf("head %v", resp.Header)
		}

		resp, body = e.do(c, "GET", e.url("/files", "path", e.home), nil)
		wantStatus(t, resp, body, 400)
		resp, body = e.do(c, "GET", e.url("/files", "path", "missing.txt"), nil)
		wantStatus(t, resp, body, 404)
		if code, msg := jsonErr(t, body); code != 404 || !strings.Contains(msg, e.h("missing.txt")) {
			t.Fatalf("404 body %d %q", code, msg)
		}
		// special files are refused without blocking
		for _, p := range []string{"fifo", "/dev/null"} {
			start := time.Now()
			resp, body = e.do(c, "GET", e.url("/files", "path", p), nil)
			wantStatus(t, resp, body, 400)
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s took %v", p, time.Since(start))
			}
		}
		resp, body = e.do(c, "GET", e.url("/files", "path", "r.txt", "username", "nobody"), nil)
		wantStatus(t, resp, body, 401)
		resp, body = e.do(c, "DELETE", e.url("/files", "path", "r.txt"), nil)
		wantStatus(t, resp, body, 405)
	}
}

func TestReadFileUser(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(e.p("root.txt"), "r", 0o600, 0)
	// the username query wins over the header
	resp, body := e.do(e.h2, "GET", e.url("/files", "path", e.p("root.txt"), "username", "root"), nil, "Authorization", "Basic dXNlcjo=")
	wantStatus(t, resp, body, 200)
	// the header names the user when there is no query
	resp, body = e.do(e.h2, "GET", e.url("/files", "path", e.p("root.txt")), nil, "Authorization", "Basic cm9vdDo=")
	wantStatus(t, resp, body, 200)
	resp, body = e.do(e.h2, "GET", e.url("/files", "path", e.p("root.txt")), nil)
	wantStatus(t, resp, body, 403)
}

func TestWriteFile(t *testing.T) {
	e := newEnv(t, Config{})
	post := func(c *http.Client, body io.Reader, hdr []string, q ...string) (*http.Response, []byte) {
		return e.do(c, "POST", e.url("/files", q...), body, append([]string{"Content-Type", "application/octet-stream"}, hdr...)...)
	}
	resp, body := post(e.h2, stringsReader("hello"), nil, "path", "up/new.txt")
	wantStatus(t, resp, body, 200)
	var res []fileResult
	must(t, json.Unmarshal(body, &res))
	if len(res) != 1 || res[0].Path != e.h("up", "new.txt") || res[0].Name != "new.txt" || res[0].Type != "file" {
		t.Fatalf("response %s", body)
	}
	if readFile(t, e.h("up", "new.txt")) != "hello" || modeOf(t, e.h("up", "new.txt")).Perm() != 0o644 {
		t.Fatal("written file")
	}
	for _, p := range []string{"up", "up/new.txt"} {
		if uid, gid := owner(t, e.h(p)); uid != testUID || gid != testUID {
			t.Fatalf("%s owned by %d:%d", p, uid, gid)
		}
	}

	// mode, and the existing mode kept when no mode is given
	resp, body = post(e.h1, stringsReader("x"), nil, "path", "m.sh", "mode", "750")
	wantStatus(t, resp, body, 200)
	if modeOf(t, e.h("m.sh")).Perm() != 0o750 {
		t.Fatalf("mode %v", modeOf(t, e.h("m.sh")))
	}
	resp, body = post(e.h2, stringsReader("y"), nil, "path", "m.sh")
	wantStatus(t, resp, body, 200)
	if modeOf(t, e.h("m.sh")).Perm() != 0o750 || readFile(t, e.h("m.sh")) != "y" {
		t.Fatalf("overwrite mode %v", modeOf(t, e.h("m.sh")))
	}
	resp, body = post(e.h2, stringsReader("y"), nil, "path", "m.sh", "mode", "9")
	wantStatus(t, resp, body, 400)

	// gzip request body, streamed without Content-Length
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(zw, "line %d\n", i)
		}
		zw.Close()
		pw.Close()
	}()
	resp, body = post(e.h2, pr, []string{"Content-Encoding", "gzip"}, "path", "big.txt")
	wantStatus(t, resp, body, 200)
	if got := readFile(t, e.h("big.txt")); !strings.HasPrefix(got, "line 0\n") || !strings.HasSuffix(got, "line 999\n") {
		t.Fatalf("gzip upload: %d bytes", len(got))
	}
	resp, body = post(e.h2, stringsReader("x"), []string{"Content-Encoding", "br"}, "path", "x")
	wantStatus(t, resp, body, 415)

	// writing through a symlink updates its target
	e.write(e.h("target.txt"), "old", 0o644, testUID)
	must(t, os.Symlink("target.txt", e.h("ln")))
	resp, body = post(e.h2, stringsReader("new"), nil, "path", "ln")
	wantStatus(t, resp, body, 200)
	if readFile(t, e.h("target.txt")) != "new" || modeOf(t, e.h("ln"))&os.ModeSymlink == 0 {
		t.Fatal("write through symlink")
	}

	resp, body = post(e.h2, stringsReader("x"), nil)
	wantStatus(t, resp, body, 400)
	resp, body = post(e.h2, stringsReader("x"), nil, "path", "up")
	wantStatus(t, resp, body, 400)
	resp, body = post(e.h2, stringsReader("x"), nil, "path", "up/new.txt/below")
	wantStatus(t, resp, body, 400)

	// root writes as root
	resp, body = post(e.h2, stringsReader("r"), nil, "path", e.p("rootfile"), "username", "root")
	wantStatus(t, resp, body, 200)
	if uid, _ := owner(t, e.p("rootfile")); uid != 0 {
		t.Fatalf("root's file owned by %d", uid)
	}
}

func TestWriteMetadata(t *testing.T) {
	e := newEnv(t, Config{})
	resp, body := e.do(e.h2, "POST", e.url("/files", "path", "meta.txt"), stringsReader("m"),
		"Content-Type", "application/octet-stream", "X-Metadata-Author", "Ada", "x-metadata-build", "42")
	wantStatus(t, resp, body, 200)
	var res []fileResult
	must(t, json.Unmarshal(body, &res))
	if res[0].Metadata["author"] != "Ada" || res[0].Metadata["build"] != "42" {
		t.Fatalf("response %s", body)
	}
	v := make([]byte, 64)
	n, err := unix.Lgetxattr(e.h("meta.txt"), "user.e2b.author", v)
	must(t, err)
	if string(v[:n]) != "Ada" {
		t.Fatalf("xattr %q", v[:n])
	}
	st, err := e.client(true).Stat(context.Background(), req(&pb.StatRequest{Path: "meta.txt"}, ""))
	must(t, err)
	if md := st.Msg.Entry.Metadata; len(md) != 2 || md["author"] != "Ada" || md["build"] != "42" {
		t.Fatalf("stat metadata %v", md)
	}
	// an upload replaces the metadata: none given, none left
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "meta.txt"), stringsReader("m2"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 200)
	if md := readMetadata(e.h("meta.txt")); len(md) != 0 {
		t.Fatalf("metadata kept: %v", md)
	}
	for _, bad := range [][]string{
		{"X-Metadata-Key", "caf\xc3\xa9"},
		{"X-Metadata-" + strings.Repeat("k", 247), "v"},
		{"X-Metadata-Big", strings.Repeat("v", 4097)},
	} {
		resp, body = e.do(e.h2, "POST", e.url("/files", "path", "bad.txt"), stringsReader("b"), "Content-Type", "application/octet-stream", bad[0], bad[1])
		wantStatus(t, resp, body, 400)
	}
	if _, err := os.Lstat(e.h("bad.txt")); !os.IsNotExist(err) {
		t.Fatal("file written despite bad metadata")
	}
}

// multipartBody builds a multipart/form-data body whose file parts carry
// raw filenames (full paths).
func multipartBody(t *testing.T, parts ...[2]string) (io.Reader, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p[0] == "" {
			h.Set("Content-Disposition", `form-data; name="other"`)
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, p[0]))
		}
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		must(t, err)
		w.Write([]byte(p[1]))
	}
	must(t, mw.Close())
	return &b, mw.FormDataContentType()
}

func TestWriteMultipart(t *testing.T) {
	e := newEnv(t, Config{})
	body, ct := multipartBody(t, [2]string{"m/one.txt", "1"}, [2]string{"", "ignored"}, [2]string{e.h("m2", "deep", "two.txt"), "2"})
	resp, rb := e.do(e.h2, "POST", e.url("/files"), body, "Content-Type", ct)
	wantStatus(t, resp, rb, 200)
	var res []fileResult
	must(t, json.Unmarshal(rb, &res))
	if len(res) != 2 || res[0].Path != e.h("m", "one.txt") || res[1].Path != e.h("m2", "deep", "two.txt") {
		t.Fatalf("response %s", rb)
	}
	if readFile(t, e.h("m", "one.txt")) != "1" || readFile(t, e.h("m2", "deep", "two.txt")) != "2" {
		t.Fatal("contents")
	}
	if uid, _ := owner(t, e.h("m2", "deep")); uid != testUID {
		t.Fatal("parent owner")
	}

	// a path query wins over the filename for a single write
	body, ct = multipartBody(t, [2]string{"ignored.txt", "q"})
	resp, rb = e.do(e.h1, "POST", e.url("/files", "path", "chosen.txt"), body, "Content-Type", ct)
	wantStatus(t, resp, rb, 200)
	if readFile(t, e.h("chosen.txt")) != "q" {
		t.Fatal("path query")
	}
	if _, err := os.Lstat(e.h("ignored.txt")); !os.IsNotExist(err) {
		t.Fatal("filename used despite path query")
	}

	// two parts for one path, atomic: 400, nothing written, no directory
	// left
	body, ct = multipartBody(t, [2]string{"fresh/first.txt", "a"}, [2]string{"dup.txt", "b"}, [2]string{e.h("dup.txt"), "c"})
	resp, rb = e.do(e.h2, "POST", e.url("/files", "atomic", "true"), body, "Content-Type", ct)
	wantStatus(t, resp, rb, 400)
	for _, p := range []string{"fresh", "dup.txt"} {
		if _, err := os.Lstat(e.h(p)); !os.IsNotExist(err) {
			t.Fatalf("%s written by a failed upload", p)
		}
	}
	assertNoTemps(t, e.home)

	body, ct = multipartBody(t, [2]string{"", "no file"})
	resp, rb = e.do(e.h2, "POST", e.url("/files"), body, "Content-Type", ct)
	wantStatus(t, resp, rb, 400)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(fi.Name(), ".warden-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

// TestAtomicWrite: an atomic write (atomic=true, what Warden's API asks for)
// that fails midway leaves the old file untouched and no temporary file
// behind.
func TestAtomicWrite(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(e.h("keep.txt"), "old content", 0o644, testUID)

	// a body that breaks midway: truncated gzip
	full := gz(t, strings.Repeat("new content ", 100000))
	resp, body := e.do(e.h2, "POST", e.url("/files", "path", "keep.txt", "atomic", "true"), bytesReader(full[:len(full)/2]),
		"Content-Type", "application/octet-stream", "Content-Encoding", "gzip")
	wantStatus(t, resp, body, 400)
	if readFile(t, e.h("keep.txt")) != "old content" {
		t.Fatal("old content changed by a failed write")
	}
	assertNoTemps(t, e.home)

	// the disk fills up: 507
	small := e.h("small")
	mountTmpfs(t, small, "1m")
	e.write(filepath.Join(small, "keep.txt"), "old content", 0o644, testUID)
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "small/keep.txt", "atomic", "1"), bytesReader(make([]byte, 3<<20)),
		"Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 507)
	if code, msg := jsonErr(t, body); code != 507 || msg != "sandbox disk is full (limit 1 MiB)" {
		t.Fatalf("507 body %d %q", code, msg)
	}
	if readFile(t, filepath.Join(small, "keep.txt")) != "old content" {
		t.Fatal("old content changed by a failed write")
	}
	assertNoTemps(t, small)

	// multipart: the second part fails, the first is not written either
	body2, ct := multipartBody(t, [2]string{"small/a.txt", "a"}, [2]string{"small/b.txt", string(make([]byte, 3<<20))})
	resp, body = e.do(e.h2, "POST", e.url("/files", "atomic", "true"), body2, "Content-Type", ct)
	wantStatus(t, resp, body, 507)
	if _, err := os.Lstat(filepath.Join(small, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("first part written by a failed upload")
	}
	assertNoTemps(t, small)
}

func TestTempName(t *testing.T) {
	for _, dst := range []string{"/a/b.txt", "/x/" + strings.Repeat("n", 250), "/.hidden"} {
		tmp := tempName(dst)
		if filepath.Dir(tmp) != filepath.Dir(dst) || len(filepath.Base(tmp)) > 255 || !isTempName(filepath.Base(tmp)) {
			t.Fatalf("tempName(%q) = %q", dst, tmp)
		}
	}
	for _, n := range []string{"a.txt", ".warden-", ".x.warden-zzzzzzzzzzzzzzzz", "x.warden-0123456789abcdef"} {
		if isTempName(n) {
			t.Fatalf("isTempName(%q)", n)
		}
	}
}
