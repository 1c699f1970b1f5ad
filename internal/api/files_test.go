package api

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestFiles(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 60*time.Second)
	a, id := env.a, env.sbA
	dir := "/home/user/files-test-" + uniq()

	e, err := a.WriteFile(ctx, id, dir+"/a/hello.txt", strings.NewReader("hello, world"), warden.WriteOptions{Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != warden.EntryFile || e.Size != 12 || e.Mode != "0600" || e.Owner != "user" || e.Name != "hello.txt" || e.Path != dir+"/a/hello.txt" {
		t.Fatalf("written entry = %+v", e)
	}
	read := func(opts warden.ReadOptions) string {
		t.Helper()
		rc, err := a.ReadFile(ctx, id, dir+"/a/hello.txt", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	if got := read(warden.ReadOptions{}); got != "hello, world" {
		t.Fatalf("read = %q", got)
	}
	if got := read(warden.ReadOptions{Offset: 7, Length: 3}); got != "wor" {
		t.Fatalf("ranged read = %q", got)
	}
	// The range really is passed through: 206 with Content-Range.
	req, _ := http.NewRequest("GET", env.hs.URL+"/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(dir+"/a/hello.txt"), nil)
	req.Header.Set("Authorization", "Bearer "+env.aKey)
	req.Header.Set("Range", "bytes=0-4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || string(b) != "hello" || resp.Header.Get("Content-Range") != "bytes 0-4/12" {
		t.Fatalf("range: %d %q %q", resp.StatusCode, b, resp.Header.Get("Content-Range"))
	}
	// As root, a file the sandbox user cannot read.
	if _, err := a.WriteFile(ctx, id, "/root/secret", strings.NewReader("x"), warden.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	_, err = a.ReadFile(ctx, id, "/root/secret", warden.ReadOptions{})
	apiErr(t, err, 403, warden.CodePermissionDenied)
	rc, err := a.ReadFile(ctx, id, "/root/secret", warden.ReadOptions{User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()

	st, err := a.Stat(ctx, id, dir+"/a")
	if err != nil || st.Type != warden.EntryDir {
		t.Fatalf("stat dir = %+v %v", st, err)
	}
	_, err = a.Stat(ctx, id, dir+"/missing")
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = a.ReadFile(ctx, id, dir+"/missing", warden.ReadOptions{})
	apiErr(t, err, 404, warden.CodeNotFound)

	m, err := a.Mkdir(ctx, id, dir+"/b/c")
	if err != nil || m.Type != warden.EntryDir || m.Path != dir+"/b/c" {
		t.Fatalf("mkdir = %+v %v", m, err)
	}
	_, err = a.Mkdir(ctx, id, dir+"/b/c")
	apiErr(t, err, 409, warden.CodeConflict)
	_, err = a.Mkdir(ctx, id, dir+"/a/hello.txt")
	apiErr(t, err, 409, warden.CodeConflict)

	mv, err := a.Move(ctx, id, dir+"/a/hello.txt", dir+"/b/c/moved.txt")
	if err != nil || mv.Path != dir+"/b/c/moved.txt" || mv.Size != 12 {
		t.Fatalf("move = %+v %v", mv, err)
	}
	ls, err := a.List(ctx, id, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if names := entryNames(ls); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("list depth 1 = %v", names)
	}
	ls, err = a.List(ctx, id, dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if names := entryNames(ls); !slices.Contains(names, "moved.txt") || !slices.Contains(names, "c") {
		t.Fatalf("list depth 3 = %v", names)
	}

	if err := a.Remove(ctx, id, dir+"/b"); err != nil {
		t.Fatal(err)
	}
	_, err = a.Stat(ctx, id, dir+"/b/c/moved.txt")
	apiErr(t, err, 404, warden.CodeNotFound)
}

func TestWatch(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 30*time.Second)
	a, id := env.a, env.sbA
	dir := "/home/user/watch-test-" + uniq()
	if _, err := a.Mkdir(ctx, id, dir); err != nil {
		t.Fatal(err)
	}
	w, err := a.Watch(ctx, id, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := a.WriteFile(ctx, id, dir+"/new.txt", strings.NewReader("x"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != "event" {
			t.Fatalf("event = %+v", ev)
		}
		if ev.Name == "new.txt" && (ev.Event == warden.WatchCreate || ev.Event == warden.WatchWrite || ev.Event == warden.WatchRename) {
			break
		}
	}
	_, err = a.Watch(ctx, id, "/no/such/dir", false)
	apiErr(t, err, 404, warden.CodeNotFound)
}

func TestArchive(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 30*time.Second)
	a, id := env.a, env.sbA
	dir := "/home/user/archive-test-" + uniq()

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"x.txt": "ex", "sub/y.txt": "why"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	if err := a.UploadArchive(ctx, id, dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	rc, err := a.ReadFile(ctx, id, dir+"/sub/y.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "why" {
		t.Fatalf("extracted file = %q", b)
	}

	rc, err = a.DownloadArchive(ctx, id, dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	rc.Close()
	if files["x.txt"] != "ex" || files["sub/y.txt"] != "why" {
		t.Fatalf("downloaded archive = %v", files)
	}

	// An entry that escapes the target is refused with 400 naming it.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../escape.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("!"))
	tw.Close()
	err = a.UploadArchive(ctx, id, dir, bytes.NewReader(buf.Bytes()))
	apiErr(t, err, 400, warden.CodeBadRequest)
	if !strings.Contains(err.Error(), "escape.txt") {
		t.Errorf("message does not name the entry: %v", err)
	}
	_, err = a.Stat(ctx, id, "/home/user/escape.txt")
	apiErr(t, err, 404, warden.CodeNotFound)
}

func TestPresign(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 30*time.Second)
	a, id := env.a, env.sbA
	const p = "/home/user/presign|test.txt"
	if _, err := a.WriteFile(ctx, id, p, strings.NewReader("presigned content"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := a.Presign(ctx, id, warden.PresignRequest{Path: p, Op: warden.PresignRead, ExpiresSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(u.ExpiresAt); d < 55*time.Second || d > 61*time.Second || !strings.HasPrefix(u.URL, env.hs.URL+"/v1/presigned/files?") {
		t.Fatalf("presigned = %+v", u)
	}
	status, body := plain(t, "GET", u.URL, nil)
	if status != 200 || body != "presigned content" {
		t.Fatalf("GET presigned: %d %q", status, body)
	}

	// Tampering with any signed parameter breaks the signature.
	for _, tc := range []struct{ param, value string }{
		{"path", "/etc/passwd"}, {"user", "root"}, {"sandbox", "sb-other"}, {"sig", strings.Repeat("0", 64)}, {"sig", "zz"},
	} {
		parsed, _ := url.Parse(u.URL)
		q := parsed.Query()
		q.Set(tc.param, tc.value)
		parsed.RawQuery = q.Encode()
		status, body := plain(t, "GET", parsed.String(), nil)
		if status != 403 || !strings.Contains(body, `"code":"forbidden"`) {
			t.Errorf("tampered %s: %d %s", tc.param, status, body)
		}
	}
	parsed, _ := url.Parse(u.URL)
	q := parsed.Query()
	q.Set("expires", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
	parsed.RawQuery = q.Encode()
	if status, _ := plain(t, "GET", parsed.String(), nil); status != 403 {
		t.Errorf("extended expiry: %d", status)
	}
	// A correctly signed but expired URL.
	past := time.Now().Add(-time.Second).Unix()
	q = url.Values{"sandbox": {id}, "path": {p}, "op": {"read"}, "user": {""},
		"expires": {strconv.FormatInt(past, 10)}, "sig": {env.srv.presignSig("GET", id, p, "", past)}}
	status, body = plain(t, "GET", env.hs.URL+"/v1/presigned/files?"+q.Encode(), nil)
	if status != 403 || !strings.Contains(body, "expired") {
		t.Errorf("expired: %d %s", status, body)
	}
	// A read URL does not write.
	if status, _ := plain(t, "PUT", u.URL, strings.NewReader("x")); status != 403 {
		t.Errorf("PUT with a read URL: %d", status)
	}

	// Write URL.
	wu, err := a.Presign(ctx, id, warden.PresignRequest{Path: "/home/user/uploaded.bin", Op: warden.PresignWrite})
	if err != nil {
		t.Fatal(err)
	}
	status, body = plain(t, "PUT", wu.URL, strings.NewReader("uploaded"))
	var e warden.Entry
	if status != 200 || json.Unmarshal([]byte(body), &e) != nil || e.Size != 8 || e.Path != "/home/user/uploaded.bin" {
		t.Fatalf("PUT presigned: %d %s", status, body)
	}
	if status, _ := plain(t, "GET", wu.URL, nil); status != 403 {
		t.Errorf("GET with a write URL: %d", status)
	}

	// Presigning needs the op's scope and access to the sandbox.
	ro := keyWith(t, "presign-ro", []string{"files:read", "sandboxes:all"})
	_, err = ro.Presign(ctx, id, warden.PresignRequest{Path: p, Op: warden.PresignWrite})
	apiErr(t, err, 403, warden.CodeForbidden)
	_, err = env.b.Presign(ctx, id, warden.PresignRequest{Path: p, Op: warden.PresignRead})
	apiErr(t, err, 404, warden.CodeNotFound)
}

// plain performs a request without an API key and returns status and body.
func plain(t *testing.T, method, u string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func entryNames(es []warden.Entry) []string {
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	return names
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the buffer holds want.
func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in output %q", want, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
