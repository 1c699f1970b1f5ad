package files

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
)

const testUID = 1000

// env is one test sandbox: passwd and group files defining root and user
// (uid 1000, home in a temp dir) and the service on an httptest server that
// speaks HTTP/1.1 and h2c.
type env struct {
	t    *testing.T
	base string // everything of this test lives below it
	home string // user's home, owned by uid 1000
	svc  *Service
	srv  *httptest.Server
	h2   *http.Client // h2c
	h1   *http.Client // HTTP/1.1
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (setfsuid, chown)")
	}
	base := t.TempDir()
	// t.TempDir and its parent are 0700: let uid 1000 through.
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			os.Chmod(d, 0o755)
		}
	}
	home := filepath.Join(base, "home", "user")
	must(t, os.MkdirAll(home, 0o755))
	must(t, os.Chown(home, testUID, testUID))
	passwd := filepath.Join(base, "passwd")
	group := filepath.Join(base, "group")
	must(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:"+home+":/bin/bash\n"), 0o644))
	must(t, os.WriteFile(group, []byte("root:x:0:\nuser:x:1000:\n"), 0o644))
	oldP, oldG := sysuser.PasswdFile, sysuser.GroupFile
	sysuser.PasswdFile, sysuser.GroupFile = passwd, group
	sysuser.Forget()
	t.Cleanup(func() {
		sysuser.PasswdFile, sysuser.GroupFile = oldP, oldG
		sysuser.Forget()
	})

	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "user"
	}
	svc := New(cfg)
	t.Cleanup(svc.Close)
	mux := http.NewServeMux()
	mux.Handle(filesystempbconnect.NewFilesystemHandler(svc))
	mux.HandleFunc("/files", svc.ServeFiles)
	mux.HandleFunc("/tar", svc.ServeTar)
	srv := httptest.NewUnstartedServer(mux)
	var sp http.Protocols
	sp.SetHTTP1(true)
	sp.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &sp
	srv.Start()
	t.Cleanup(srv.Close)

	var p2, p1 http.Protocols
	p2.SetUnencryptedHTTP2(true)
	p1.SetHTTP1(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &p2, DisableCompression: true}}
	h1 := &http.Client{Transport: &http.Transport{Protocols: &p1, DisableCompression: true}}
	t.Cleanup(h2.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	return &env{t: t, base: base, home: home, svc: svc, srv: srv, h2: h2, h1: h1}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// client is a Connect client: JSON codec (as the E2B SDK) or binary proto.
func (e *env) client(json bool) filesystempbconnect.FilesystemClient {
	var opts []connect.ClientOption
	if json {
		opts = append(opts, connect.WithProtoJSON())
	}
	return filesystempbconnect.NewFilesystemClient(e.h2, e.srv.URL, opts...)
}

// req builds a Connect request acting as user ("" = default user).
func req[T any](msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if user != "" {
		r.Header().Set("Authorization", sysuser.BasicAuth(user))
	}
	return r
}

// p is a path below base.
func (e *env) p(parts ...string) string { return filepath.Join(append([]string{e.base}, parts...)...) }

// h is a path below the user's home.
func (e *env) h(parts ...string) string { return filepath.Join(append([]string{e.home}, parts...)...) }

func (e *env) write(p, content string, mode os.FileMode, uid int) {
	e.t.Helper()
	must(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(e.t, os.WriteFile(p, []byte(content), mode))
	must(e.t, os.Chmod(p, mode))
	must(e.t, os.Lchown(p, uid, uid))
}

func (e *env) url(route string, q ...string) string {
	u := e.srv.URL + route
	for i := 0; i+1 < len(q); i += 2 {
		if i == 0 {
			u += "?"
		} else {
			u += "&"
		}
		u += q[i] + "=" + urlEscape(q[i+1])
	}
	return u
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_./~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (e *env) do(c *http.Client, method, url string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	r, err := http.NewRequest(method, url, body)
	must(e.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(r)
	must(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(e.t, err)
	return resp, b
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
}

func wantStatus(t *testing.T, resp *http.Response, body []byte, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, status)
	}
}

func owner(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return st.Uid, st.Gid
}

func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	must(t, err)
	return fi.Mode()
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

// mountTmpfs mounts a small tmpfs at dir, or skips the test.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0777"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

// snapshot describes every path below dir (type, mode, owner, content or
// link target), to prove nothing outside a target changed.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			m[p] = "error " + err.Error()
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		desc := fmt.Sprintf("%o %d:%d", st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		m[p] = desc
		return nil
	})
	return m
}

func diffSnapshots(before, after map[string]string, ignorePrefix string) []string {
	var d []string
	for p, a := range after {
		if ignorePrefix != "" && (p == ignorePrefix || strings.HasPrefix(p, ignorePrefix+"/")) {
			continue
		}
		if b, ok := before[p]; !ok {
			d = append(d, "new "+p+" "+a)
		} else if a != b {
			d = append(d, "changed "+p+" "+b+" => "+a)
		}
	}
	for p := range before {
		if ignorePrefix != "" && (p == ignorePrefix || strings.HasPrefix(p, ignorePrefix+"/")) {
			continue
		}
		if _, ok := after[p]; !ok {
			d = append(d, "gone "+p)
		}
	}
	return d
}

// tarEnt describes one entry of a test archive.
type tarEnt struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func mkTar(t testing.TB, ents ...tarEnt) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		must(t, tw.WriteHeader(hdr))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			must(t, err)
		}
	}
	must(t, tw.Close())
	return buf.Bytes()
}

var errTimeout = errors.New("timeout")

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
func bytesReader(b []byte) io.Reader   { return bytes.NewReader(b) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
