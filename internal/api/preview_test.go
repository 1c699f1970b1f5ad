package api

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// testPreviewDomain is the harness's preview domain: requests whose Host is
// {port}-{id}.preview.test go to the port proxy.
const testPreviewDomain = "preview.test"

// echoServer is a program for the sandbox, python3 without extra packages:
// on its port, a WebSocket upgrade gets an echo server (RFC 6455 frames,
// text and binary echoed, close answered), any other request a JSON
// description of itself (method, path, headers).
const echoServer = `
import base64, hashlib, json, struct, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def describe(self):
        body = json.dumps({"method": self.command, "path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.describe()
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() != "websocket":
            return self.describe()
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            hdr = r.read(2)
            if len(hdr) < 2:
                return
            op, n = hdr[0] & 0x0f, hdr[1] & 0x7f
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if hdr[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if n < 126:
                out = bytes([0x80 | op, n])
            elif n < 65536:
                out = bytes([0x80 | op, 126]) + struct.pack(">H", n)
            else:
                out = bytes([0x80 | op, 127]) + struct.pack(">Q", n)
            if op == 9:  # ping: pong
                out = bytes([0x8a]) + out[1:]
            if op in (1, 2, 8, 9):
                w.write(out + data)
                w.flush()
            if op == 8:
                self.close_connection = True
                return

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// Ports the preview test uses in its sandbox.
const (
	portHTTP   = 8000 // python3 -m http.server
	portEcho   = 8001 // echoServer
	portClosed = 8009 // nothing listens
)

// previewReq sends a request to the test server. host, when set, is the
// request's Host (the daemon routes preview hosts by it).
type previewReq struct {
	method, path, host, key string
	header                  http.Header
	jar                     http.CookieJar
}

type previewResp struct {
	status int
	header http.Header
	body   string
}

func (q previewReq) do(t *testing.T) previewResp {
	t.Helper()
	method := q.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, env.hs.URL+q.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range q.header {
		req.Header[k] = vs
	}
	if q.host != "" {
		req.Host = q.host
	}
	if q.key != "" {
		req.Header.Set("Authorization", "Bearer "+q.key)
	}
	hc := &http.Client{Jar: q.jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, q.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return previewResp{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// wantError asserts a JSON error body with the given status and code.
func (r previewResp) wantError(t *testing.T, what string, status int, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Code, Message, RequestID string
		} `json:"error"`
	}
	if r.status != status || json.Unmarshal([]byte(r.body), &e) != nil || e.Error.Code != code {
		t.Fatalf("%s: %d %q, want %d %s", what, r.status, r.body, status, code)
	}
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || r.header.Get("X-Request-Id") == "" {
		t.Errorf("%s: headers %v", what, r.header)
	}
}

// echoed is the JSON the echo server answers plain requests with.
type echoed struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

func (r previewResp) echoed(t *testing.T, what string) echoed {
	t.Helper()
	var e echoed
	if r.status != 200 || json.Unmarshal([]byte(r.body), &e) != nil {
		t.Fatalf("%s: %d %q, want the echo server's JSON", what, r.status, r.body)
	}
	return e
}

func pathURL(id string, port int, rest string) string {
	return "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/proxy/" + rest
}

func hostOf(id string, port int) string {
	return strconv.Itoa(port) + "-" + id + "." + testPreviewDomain
}

// tokenOf returns the warden_token parameter of a preview URL.
func tokenOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Query().Get("warden_token") == "" {
		t.Fatalf("preview URL %q has no token", u)
	}
	return p.Query().Get("warden_token")
}

// TestPreview runs a web server and a WebSocket echo server in a sandbox
// and reaches them through the daemon's port proxy, by path and by host,
// with each kind of credential and without.
func TestPreview(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 3*time.Minute)
	a := env.a
	sb, err := a.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Metadata: map[string]string{"test": "preview"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	defer env.a.KillSandbox(context.Background(), id)

	for path, content := range map[string]string{
		"/tmp/www/index.html":  "<a href=\"page.html\">hello from the sandbox</a>\n",
		"/tmp/www/page.html":   "second page\n",
		"/tmp/www/dir/sub.txt": "in a directory\n",
		"/tmp/echo.py":         echoServer,
	} {
		if _, err := a.WriteFile(ctx, id, path, strings.NewReader(content), warden.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range []string{
		"cd /tmp/www && exec python3 -m http.server " + strconv.Itoa(portHTTP) + " --bind 127.0.0.1",
		"exec python3 /tmp/echo.py " + strconv.Itoa(portEcho),
	} {
		s, err := a.StartProcess(ctx, id, warden.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // the server keeps running
	}
	// Wait for both servers, through the proxy (with the owner's key).
	for _, port := range []int{portHTTP, portEcho} {
		for i := 0; ; i++ {
			r := previewReq{path: pathURL(id, port, ""), key: env.aKey}.do(t)
			if r.status == 200 {
				break
			}
			if r.status != http.StatusBadGateway || i > 150 {
				t.Fatalf("port %d never came up: %d %s", port, r.status, r.body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("by path with an API key", func(t *testing.T) {
		r := previewReq{path: pathURL(id, portHTTP, "index.html"), key: env.aKey}.do(t)
		if r.status != 200 || !strings.Contains(r.body, "hello from the sandbox") {
			t.Fatalf("%d %q", r.status, r.body)
		}
		r = previewReq{path: pathURL(id, portHTTP, "dir/sub.txt"), key: env.aKey}.do(t)
		if r.status != 200 || r.body != "in a directory\n" {
			t.Fatalf("subdirectory: %d %q", r.status, r.body)
		}
		r = previewReq{path: pathURL(id, portHTTP, "missing.html"), key: env.aKey}.do(t)
		if r.status != 404 || strings.Contains(r.body, `"error"`) {
			t.Fatalf("the program's own 404 is not passed through: %d %q", r.status, r.body)
		}
	})

	t.Run("by host with an API key", func(t *testing.T) {
		r := previewReq{path: "/page.html", host: hostOf(id, portHTTP), key: env.aKey}.do(t)
		if r.status != 200 || r.body != "second page\n" {
			t.Fatalf("%d %q", r.status, r.body)
		}
		// Mixed case and the listener's port in Host route the same; the
		// API is not served on preview hosts.
		host := strings.ToUpper(hostOf(id, portEcho)) + ":" + strings.Split(env.hs.Listener.Addr().String(), ":")[1]
		e := previewReq{path: "/v1/sandboxes", host: host, key: env.aKey}.do(t).echoed(t, "API path on a preview host")
		if e.Path != "/v1/sandboxes" {
			t.Errorf("program saw path %q", e.Path)
		}
		previewReq{path: "/", host: "nope." + testPreviewDomain, key: env.aKey}.do(t).wantError(t, "host that is no port", 404, warden.CodeNotFound)
		previewReq{path: "/", host: "0-" + id + "." + testPreviewDomain, key: env.aKey}.do(t).wantError(t, "port 0", 404, warden.CodeNotFound)
	})

	t.Run("the program's view", func(t *testing.T) {
		u, err := a.PreviewURL(ctx, id, portEcho, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tok := tokenOf(t, u.URL)
		// Path and query (token removed), the client's Host, forwarding
		// headers, no Warden key, no preview cookie, other cookies and
		// Authorization schemes untouched.
		r := previewReq{method: "POST", path: pathURL(id, portEcho, "a/b%2Fc?x=1&warden_token="+url.QueryEscape(tok)+"&y=2"),
			header: http.Header{"Cookie": {"warden_preview=" + tok + "; theirs=1"}, "Authorization": {"Basic dTpw"}}}.do(t)
		e := r.echoed(t, "by path with a token")
		if e.Method != "POST" || e.Path != "/a/b%2Fc?x=1&y=2" {
			t.Errorf("program saw %s %s", e.Method, e.Path)
		}
		h := e.Headers
		if h["host"] != env.hs.Listener.Addr().String() || h["x-forwarded-host"] != h["host"] || h["x-forwarded-proto"] != "http" ||
			h["x-forwarded-prefix"] != "/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(portEcho)+"/proxy" || h["x-forwarded-for"] == "" {
			t.Errorf("forwarding headers: %v", h)
		}
		if h["cookie"] != "theirs=1" || h["authorization"] != "Basic dTpw" {
			t.Errorf("cookie %q authorization %q", h["cookie"], h["authorization"])
		}
		e = previewReq{path: "/x?warden_token=" + url.QueryEscape(tok), host: hostOf(id, portEcho), key: env.aKey}.do(t).echoed(t, "by host with a key")
		if _, ok := e.Headers["authorization"]; ok || e.Path != "/x" || e.Headers["host"] != hostOf(id, portEcho) {
			t.Errorf("by host: program saw %s with %v", e.Path, e.Headers)
		}
		if _, ok := e.Headers["x-forwarded-prefix"]; ok {
			t.Errorf("by host: X-Forwarded-Prefix %q", e.Headers["x-forwarded-prefix"])
		}
	})

	t.Run("no credentials", func(t *testing.T) {
		previewReq{path: pathURL(id, portHTTP, "")}.do(t).wantError(t, "by path", 401, warden.CodeUnauthenticated)
		previewReq{path: "/", host: hostOf(id, portHTTP)}.do(t).wantError(t, "by host", 401, warden.CodeUnauthenticated)
		// A Warden key that is not valid is refused, not passed on.
		previewReq{path: pathURL(id, portHTTP, ""), key: "wdn_abcdefgh_" + strings.Repeat("A", 32)}.do(t).wantError(t, "bad key", 401, warden.CodeUnauthenticated)
	})

	t.Run("signed URL and cookie", func(t *testing.T) {
		u, err := a.PreviewURL(ctx, id, portHTTP, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantPath := env.hs.URL + pathURL(id, portHTTP, "") + "?warden_token="
		if !strings.HasPrefix(u.URL, wantPath) || u.Public {
			t.Fatalf("url %q, want it to start with %q", u.URL, wantPath)
		}
		if d := time.Until(u.ExpiresAt); d < 59*time.Minute || d > time.Hour+time.Second {
			t.Errorf("default lifetime: expires in %v", d)
		}
		port := strings.Split(env.hs.Listener.Addr().String(), ":")[1]
		if want := "http://" + hostOf(id, portHTTP) + ":" + port + "/?warden_token="; !strings.HasPrefix(u.HostURL, want) {
			t.Errorf("host_url %q, want it to start with %q", u.HostURL, want)
		}
		if tokenOf(t, u.URL) != tokenOf(t, u.HostURL) {
			t.Error("the two URLs carry different tokens")
		}

		// By path: the token sets a cookie scoped to the port's prefix, and
		// the page's relative links then work without the token.
		jar, _ := cookiejar.New(nil)
		p := strings.TrimPrefix(u.URL, env.hs.URL)
		r := previewReq{path: p, jar: jar}.do(t)
		if r.status != 200 || !strings.Contains(r.body, "hello from the sandbox") {
			t.Fatalf("signed URL: %d %q", r.status, r.body)
		}
		sc := r.header.Get("Set-Cookie")
		for _, want := range []string{"warden_preview=", "Path=/v1/sandboxes/" + id + "/ports/8000/proxy/", "HttpOnly", "SameSite=Lax", "Expires="} {
			if !strings.Contains(sc, want) {
				t.Errorf("Set-Cookie %q lacks %q", sc, want)
			}
		}
		if r := (previewReq{path: pathURL(id, portHTTP, "page.html"), jar: jar}).do(t); r.status != 200 || r.body != "second page\n" {
			t.Errorf("relative link with the cookie: %d %q", r.status, r.body)
		}
		// The cookie is the port's only.
		previewReq{path: pathURL(id, portEcho, ""), jar: jar}.do(t).wantError(t, "cookie on another port", 401, warden.CodeUnauthenticated)

		// By host, the same token.
		hp := strings.TrimPrefix(u.HostURL, "http://"+hostOf(id, portHTTP)+":"+port)
		if r := (previewReq{path: hp, host: hostOf(id, portHTTP)}).do(t); r.status != 200 || !strings.Contains(r.body, "hello from the sandbox") {
			t.Errorf("host URL: %d %q", r.status, r.body)
		} else if sc := r.header.Get("Set-Cookie"); !strings.Contains(sc, "Path=/;") {
			t.Errorf("host URL cookie %q", sc)
		}
		if r := (previewReq{path: "/page.html", host: hostOf(id, portHTTP),
			header: http.Header{"Cookie": {"warden_preview=" + tokenOf(t, u.URL)}}}).do(t); r.status != 200 {
			t.Errorf("host with the cookie: %d %q", r.status, r.body)
		}

		// .../proxy redirects to .../proxy/ with the query.
		r = previewReq{path: strings.Replace(p, "/proxy/?", "/proxy?", 1)}.do(t)
		if r.status != http.StatusTemporaryRedirect || r.header.Get("Location") != p {
			t.Errorf("redirect: %d to %q, want %q", r.status, r.header.Get("Location"), p)
		}
	})

	t.Run("expired signed URL", func(t *testing.T) {
		u, err := a.PreviewURL(ctx, id, portHTTP, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(u.ExpiresAt) + 100*time.Millisecond)
		r := previewReq{path: strings.TrimPrefix(u.URL, env.hs.URL)}.do(t)
		r.wantError(t, "expired", 403, warden.CodeForbidden)
		if !strings.Contains(r.body, "expired") || r.header.Get("Set-Cookie") != "" {
			t.Errorf("expired: %q, Set-Cookie %q", r.body, r.header.Get("Set-Cookie"))
		}
		previewReq{path: pathURL(id, portHTTP, ""), header: http.Header{"Cookie": {"warden_preview=" + tokenOf(t, u.URL)}}}.do(t).
			wantError(t, "expired cookie", 403, warden.CodeForbidden)
	})

	t.Run("wrong sandbox, port or key", func(t *testing.T) {
		// A token of the shared sandbox (same owner) does not open this one.
		other, err := a.PreviewURL(ctx, env.sbA, portHTTP, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tok := tokenOf(t, other.URL)
		previewReq{path: pathURL(id, portHTTP, "?warden_token="+url.QueryEscape(tok))}.do(t).wantError(t, "other sandbox's token", 403, warden.CodeForbidden)
		previewReq{path: "/?warden_token=" + url.QueryEscape(tok), host: hostOf(id, portHTTP)}.do(t).wantError(t, "other sandbox's token by host", 403, warden.CodeForbidden)
		// A token of another port of this sandbox.
		mine, err := a.PreviewURL(ctx, id, portEcho, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		previewReq{path: pathURL(id, portHTTP, "?warden_token="+url.QueryEscape(tokenOf(t, mine.URL)))}.do(t).wantError(t, "other port's token", 403, warden.CodeForbidden)
		// A tampered one.
		bad := tokenOf(t, mine.URL)
		dot := strings.IndexByte(bad, '.')
		flip := map[bool]string{true: "B", false: "A"}[bad[dot+1] == 'A']
		bad = bad[:dot+1] + flip + bad[dot+2:]
		previewReq{path: pathURL(id, portEcho, "?warden_token="+url.QueryEscape(bad))}.do(t).wantError(t, "tampered token", 403, warden.CodeForbidden)
		// Another principal's key: the sandbox does not exist for it.
		previewReq{path: pathURL(id, portHTTP, ""), key: env.bKey}.do(t).wantError(t, "B's key", 404, warden.CodeNotFound)
		previewReq{path: "/", host: hostOf(id, portHTTP), key: env.bKey}.do(t).wantError(t, "B's key by host", 404, warden.CodeNotFound)
		// B may not make URLs for A's sandbox either.
		_, err = env.b.PreviewURL(ctx, id, portHTTP, time.Hour)
		apiErr(t, err, 404, warden.CodeNotFound)
		_, err = env.b.PublishPort(ctx, id, portHTTP, true)
		apiErr(t, err, 404, warden.CodeNotFound)
		// A key without sandboxes:exec.
		_, roKey, err := newAgent(ctx, "preview-ro-"+uniq(), []string{"sandboxes:read", "sandboxes:all"})
		if err != nil {
			t.Fatal(err)
		}
		r := previewReq{path: pathURL(id, portHTTP, ""), key: roKey}.do(t)
		r.wantError(t, "key without sandboxes:exec", 403, warden.CodeForbidden)
		if !strings.Contains(r.body, "sandboxes:exec") {
			t.Errorf("403 does not name the scope: %s", r.body)
		}
		_, err = client(roKey).PreviewURL(ctx, id, portHTTP, time.Hour)
		apiErr(t, err, 403, warden.CodeForbidden)
		// The admin (sandboxes:all through admin) may.
		if r := (previewReq{path: pathURL(id, portHTTP, ""), key: env.adminKey}).do(t); r.status != 200 {
			t.Errorf("admin: %d %s", r.status, r.body)
		}
	})

	t.Run("publish", func(t *testing.T) {
		previewReq{path: pathURL(id, portEcho, "")}.do(t).wantError(t, "unpublished", 401, warden.CodeUnauthenticated)
		p, err := a.PublishPort(ctx, id, portEcho, true)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Public || p.Port != portEcho || p.SandboxID != id || p.URL != env.hs.URL+pathURL(id, portEcho, "") ||
			!strings.HasPrefix(p.HostURL, "http://"+hostOf(id, portEcho)+":") {
			t.Errorf("published = %+v", p)
		}
		previewReq{path: pathURL(id, portEcho, "pub")}.do(t).echoed(t, "public by path")
		previewReq{path: "/pub", host: hostOf(id, portEcho)}.do(t).echoed(t, "public by host")
		// Only that port.
		previewReq{path: pathURL(id, portHTTP, "")}.do(t).wantError(t, "other port", 401, warden.CodeUnauthenticated)
		// A Warden key sent to a public port is not passed on either.
		e := previewReq{path: pathURL(id, portEcho, ""), key: env.bKey}.do(t).echoed(t, "public with a key")
		if _, ok := e.Headers["authorization"]; ok {
			t.Error("a Warden key reached the program")
		}
		if u, err := a.PreviewURL(ctx, id, portEcho, time.Minute); err != nil || !u.Public {
			t.Errorf("preview URL of a public port: %+v %v", u, err)
		}

		// Unpublish (DELETE through plain HTTP; POST false through the SDK).
		req, _ := http.NewRequest(http.MethodDelete, env.hs.URL+"/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(portEcho), nil)
		req.Header.Set("Authorization", "Bearer "+env.aKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		previewReq{path: pathURL(id, portEcho, "")}.do(t).wantError(t, "unpublished again", 401, warden.CodeUnauthenticated)
		if _, err := a.PublishPort(ctx, id, portEcho, true); err != nil {
			t.Fatal(err)
		}
		if p, err := a.PublishPort(ctx, id, portEcho, false); err != nil || p.Public {
			t.Fatalf("publish false: %+v %v", p, err)
		}
		previewReq{path: "/", host: hostOf(id, portEcho)}.do(t).wantError(t, "unpublished by host", 401, warden.CodeUnauthenticated)

		// Bad requests.
		for _, p := range []string{"0", "65536", "080", "x"} {
			r := previewReq{method: "POST", path: "/v1/sandboxes/" + id + "/ports/" + p, key: env.aKey}.do(t)
			if r.status != 400 {
				t.Errorf("port %q: %d %s", p, r.status, r.body)
			}
		}
		_, err = a.PreviewURL(ctx, id, portEcho, 8*24*time.Hour)
		apiErr(t, err, 422, warden.CodeValidationFailed)
	})

	t.Run("not HTTP", func(t *testing.T) {
		// A program that accepts and hangs up without a word.
		s, err := a.StartProcess(ctx, id, warden.ExecRequest{Cmd: []string{"python3", "-c",
			"import socket\ns = socket.create_server(('127.0.0.1', 8002))\nwhile True:\n    s.accept()[0].close()"}})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		for i := 0; ; i++ {
			r := previewReq{path: pathURL(id, 8002, ""), key: env.aKey}.do(t)
			if r.status == 502 && strings.Contains(r.body, "did not answer with HTTP") {
				r.wantError(t, "not HTTP", 502, warden.CodeBadGateway)
				break
			}
			if r.status != 502 || i > 100 {
				t.Fatalf("not HTTP: %d %s", r.status, r.body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("closed port", func(t *testing.T) {
		r := previewReq{path: pathURL(id, portClosed, ""), key: env.aKey}.do(t)
		r.wantError(t, "closed port by path", 502, warden.CodeBadGateway)
		if !strings.Contains(r.body, "port 8009") {
			t.Errorf("message: %s", r.body)
		}
		previewReq{path: "/", host: hostOf(id, portClosed), key: env.aKey}.do(t).wantError(t, "closed port by host", 502, warden.CodeBadGateway)
	})

	t.Run("websocket", func(t *testing.T) {
		u, err := a.PreviewURL(ctx, id, portEcho, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tok := url.QueryEscape(tokenOf(t, u.URL))
		hsAddr := env.hs.Listener.Addr().String()
		// Dials go to the test server whatever the URL's host, so that
		// preview hosts resolve.
		viaTestServer := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", hsAddr)
		}}}
		for name, tc := range map[string]struct {
			url string
			hdr http.Header
		}{
			"by path with a token": {url: "ws://" + hsAddr + pathURL(id, portEcho, "ws?warden_token="+tok)},
			"by path with a key":   {url: "ws://" + hsAddr + pathURL(id, portEcho, "ws"), hdr: http.Header{"Authorization": {"Bearer " + env.aKey}}},
			"by host with a token": {url: "ws://" + hostOf(id, portEcho) + "/ws?warden_token=" + tok},
		} {
			t.Run(name, func(t *testing.T) {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				c, resp, err := websocket.Dial(wctx, tc.url, &websocket.DialOptions{HTTPClient: viaTestServer, HTTPHeader: tc.hdr})
				if err != nil {
					t.Fatalf("dial %s: %v", tc.url, err)
				}
				defer c.CloseNow()
				if resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("status %d", resp.StatusCode)
				}
				c.SetReadLimit(1 << 20)
				msgs := []struct {
					typ  websocket.MessageType
					data string
				}{
					{websocket.MessageText, "hello"},
					{websocket.MessageBinary, "\x00\x01\x02binary"},
					{websocket.MessageText, strings.Repeat("long message ", 10000)}, // 130 KB, 64-bit length
				}
				for _, m := range msgs {
					if err := c.Write(wctx, m.typ, []byte(m.data)); err != nil {
						t.Fatal(err)
					}
					typ, got, err := c.Read(wctx)
					if err != nil || typ != m.typ || string(got) != m.data {
						t.Fatalf("echo of %d bytes: type %v, %d bytes, %v", len(m.data), typ, len(got), err)
					}
				}
				if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
					t.Errorf("close handshake: %v", err)
				}
			})
		}
		// Without credentials the upgrade is refused with the JSON error.
		_, resp, err := websocket.Dial(ctx, "ws://"+hsAddr+pathURL(id, portEcho, "ws"), &websocket.DialOptions{HTTPClient: viaTestServer})
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Errorf("websocket without credentials: %v %v", resp, err)
		}
	})

	t.Run("audit", func(t *testing.T) {
		counts := map[string]int{}
		for ev, err := range env.admin.AllAuditEvents(ctx, warden.AuditQuery{Target: id, Limit: 1000}) {
			if err != nil {
				t.Fatal(err)
			}
			counts[ev.Action+" "+ev.Outcome]++
			if _, ok := ev.Detail["port"]; strings.HasPrefix(ev.Action, "port.") && !ok {
				t.Errorf("%s event without the port: %s", ev.Action, ev.Detail)
			}
		}
		for _, want := range []string{"port.publish success", "port.unpublish success", "port.url success", "port.proxy denied"} {
			if counts[want] == 0 {
				t.Errorf("no %q event; have %v", want, counts)
			}
		}
		if counts["port.proxy success"] != 0 {
			t.Errorf("proxied calls are audited: %v", counts)
		}
	})

	t.Run("sandbox ended", func(t *testing.T) {
		if _, err := a.PublishPort(ctx, id, portEcho, true); err != nil {
			t.Fatal(err)
		}
		u, err := a.PreviewURL(ctx, id, portHTTP, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		previewReq{path: strings.TrimPrefix(u.URL, env.hs.URL)}.do(t).wantError(t, "token of an ended sandbox", 409, warden.CodeConflict)
		// The published port was forgotten.
		previewReq{path: pathURL(id, portEcho, "")}.do(t).wantError(t, "public port of an ended sandbox", 401, warden.CodeUnauthenticated)
		_, err = a.PublishPort(ctx, id, portEcho, true)
		apiErr(t, err, 409, warden.CodeConflict)
	})
}

func TestPreviewHelpers(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a=1", "a=1"},
		{"warden_token=x", ""},
		{"a=1&warden_token=x&b=%2F", "a=1&b=%2F"},
		{"warden%5Ftoken=x&a=1", "a=1"},
		{"warden_tokens=x", "warden_tokens=x"},
	} {
		if got := dropQueryParam(tc.in, PreviewTokenParam); got != tc.want {
			t.Errorf("dropQueryParam(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"warden_preview=x"}, nil},
		{[]string{"a=1; warden_preview=x; b=\"q\""}, []string{"a=1; b=\"q\""}},
		{[]string{"warden_preview=x", "c=3"}, []string{"c=3"}},
	} {
		h := http.Header{"Cookie": tc.in}
		dropCookie(h, PreviewCookie)
		if got := h.Values("Cookie"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("dropCookie(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	s := &Server{previewDomain: "p.example"}
	for _, tc := range []struct {
		host string
		id   string
		port int
		ok   bool
		err  bool
	}{
		{"8000-sb-abc.p.example", "sb-abc", 8000, true, false},
		{"8000-SB-ABC.P.EXAMPLE:7070", "sb-abc", 8000, true, false},
		{"p.example", "", 0, false, false},
		{"api.example", "", 0, false, false},
		{"x.8000-sb-abc.p.example", "", 0, true, true},
		{"08000-sb-abc.p.example", "", 0, true, true},
		{"8000-.p.example", "", 0, true, true},
		{"www.p.example", "", 0, true, true},
	} {
		id, port, ok, err := s.previewHost(tc.host)
		if id != tc.id || port != tc.port || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("previewHost(%q) = %q %d %v %v", tc.host, id, port, ok, err)
		}
	}
	if isWardenKey("Basic dTpw") || isWardenKey("Bearer eyJhbGciOi") || !isWardenKey("bearer  wdn_x") {
		t.Error("isWardenKey")
	}
}
