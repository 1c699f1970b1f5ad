package integration

// Issue 15, items 6, 10, 12 and 13, through the real daemon: slow request
// bodies and connection caps on every listener, the preview proxy's
// credential stripping, /metrics authentication, and the preview proxy's
// WebSocket caps.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// lnWriteConfig writes a wardend config file with body (version 1 is added).
func lnWriteConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wardend.yaml")
	if err := os.WriteFile(p, []byte("version: 1\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lnDialFrom connects to addr from a loopback address (all of 127.0.0.0/8 is
// loopback: each address is its own client for the per-address caps).
func lnDialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 20 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lnRawExchange writes req on c and reads the response head and body (which
// must be small); err when the server closed or reset the connection
// without a response.
func lnRawExchange(c net.Conn, req string) (*http.Response, string, error) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, "", nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// TestSecSlowBodies: connections that send headers and then a body slower
// than the minimum rate (a byte every half second, or nothing) are closed
// by the server within the body timeout, on the API listener (API and
// preview routes) and the E2B listener; legitimate slow work is not cut.
func TestSecSlowBodies(t *testing.T) {
	state, run := newDirs(t)
	e2bAddr := freePort(t)
	cfg := lnWriteConfig(t, "limits:\n  body_timeout: 2s\n  body_min_rate: 1024\n")
	d := startDaemon(t, state, run, "--config", cfg, "--e2b-listen", e2bAddr, "--preview-domain", "preview.test")
	addr := strings.TrimPrefix(d.url, "http://")

	const deadline = 2 * time.Second
	const slack = 30 * time.Second // generous: the machine is shared
	targets := []struct{ name, addr, head string }{
		{"api", addr, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"},
		{"api presigned", addr, "PUT /v1/presigned/files?sandbox=sb-x&path=/tmp/x HTTP/1.1\r\nHost: x\r\n"},
		{"preview by host", addr, "POST /upload HTTP/1.1\r\nHost: 8000-sb-nothere.preview.test\r\n"},
		{"preview by path", addr, "POST /v1/sandboxes/sb-nothere/ports/8000/proxy/upload HTTP/1.1\r\nHost: x\r\n"},
		{"e2b", e2bAddr, "POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"},
		{"e2b sandbox traffic", e2bAddr, "POST /files?path=/tmp/x HTTP/1.1\r\nHost: 49983-sb-nothere.localhost\r\nE2b-Sandbox-Id: sb-nothere\r\nE2b-Sandbox-Port: 49983\r\n"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(targets))
	for _, tg := range targets {
		for i, gap := range []time.Duration{500 * time.Millisecond, 0, 500 * time.Millisecond, 0} {
			c := lnDialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), tg.addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if _, err := io.WriteString(c, tg.head+"Content-Length: 100000\r\n\r\n{"); err != nil {
					errs <- fmt.Errorf("%s: write headers: %w", tg.name, err)
					return
				}
				stop := make(chan struct{})
				defer close(stop)
				if gap > 0 {
					go func() {
						for {
							select {
							case <-stop:
								return
							case <-time.After(gap):
								if _, err := c.Write([]byte(" ")); err != nil {
									return
								}
							}
						}
					}()
				}
				c.SetReadDeadline(time.Now().Add(deadline + slack))
				_, err := io.Copy(io.Discard, c) // until the server closes
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					errs <- fmt.Errorf("%s: a body sending a byte every %s still connected after %s (body timeout %s)",
						tg.name, gap, time.Since(start).Round(time.Second), deadline)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Legitimate slow work: a command that streams for longer than the
	// body timeout (its body was read in full), and an authenticated
	// upload that pauses for longer than the body timeout (the streaming
	// allowance, 5 minutes by default).
	ctx := ctxT(t)
	c := d.client(t, d.adminKey)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "echo start; sleep 5; echo done"}, warden.ExecIO{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "start\ndone\n" {
		t.Fatalf("a command streaming for 5 s with a 2 s body timeout: %+v %v %q", res, err, out.String())
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first half, "))
		time.Sleep(5 * time.Second)
		pw.Write([]byte("second half"))
		pw.Close()
	}()
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/slow.txt", pr, warden.WriteOptions{}); err != nil {
		t.Fatalf("an authenticated upload pausing 5 s: %v", err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "/tmp/slow.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "first half, second half" {
		t.Fatalf("uploaded %q", b)
	}
}

// TestSecConnectionCaps: with a per-address cap of 8, a client holding 8
// connections (across the API and E2B listeners) has its 9th refused on
// either, while other clients are served, and it recovers once it closes
// some.
func TestSecConnectionCaps(t *testing.T) {
	state, run := newDirs(t)
	e2bAddr := freePort(t)
	cfg := lnWriteConfig(t, "header_timeout: 60s\nlimits:\n  max_conns_per_ip: 8\n")
	d := startDaemon(t, state, run, "--config", cfg, "--e2b-listen", e2bAddr)
	addr := strings.TrimPrefix(d.url, "http://")
	const client = "127.0.0.2"
	get := "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	e2bGet := "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" // any answer will do

	var held []net.Conn
	for i := 0; i < 8; i++ {
		a, req := addr, get
		if i%2 == 1 {
			a, req = e2bAddr, e2bGet
		}
		c := lnDialFrom(t, client, a)
		resp, body, err := lnRawExchange(c, req)
		if err != nil || resp.StatusCode == 429 || resp.StatusCode == 503 {
			t.Fatalf("connection %d of 8: %v %q %v", i+1, resp, body, err)
		}
		held = append(held, c)
	}
	for _, tc := range []struct{ name, addr, req, code string }{
		{"api", addr, get, `"code":"rate_limited"`},
		{"e2b", e2bAddr, e2bGet, `"code":429`},
	} {
		resp, body, err := lnRawExchange(lnDialFrom(t, client, tc.addr), tc.req)
		if err == nil && (resp.StatusCode != 429 || !strings.Contains(body, tc.code)) {
			t.Fatalf("9th connection to %s: %d %q, want it refused (429 or closed)", tc.name, resp.StatusCode, body)
		}
	}
	// Other clients are served meanwhile, the unix socket too.
	if resp, body, err := lnRawExchange(lnDialFrom(t, "127.0.0.3", addr), get); err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client: %v %q %v", resp, body, err)
	}
	uc, err := net.Dial("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if resp, body, err := lnRawExchange(uc, get); err != nil || resp.StatusCode != 200 {
		t.Fatalf("unix socket: %v %q %v", resp, body, err)
	}
	// Closing two frees two slots (once the daemon sees the closes).
	held[0].Close()
	held[1].Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, _, err := lnRawExchange(lnDialFrom(t, client, addr), get)
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 30 s after closing two connections: %v %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lnEchoHeaders is a program for the sandbox: it answers every request with
// its request line and header lines, repetitions and spellings as sent.
const lnEchoHeaders = `
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = (self.requestline + "\n" + "".join(k + ": " + v + "\n" for k, v in self.headers.items())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// lnStartProgram writes a python program into the sandbox, runs it in the
// background on port, and waits until the preview proxy reaches it.
func lnStartProgram(t *testing.T, d *daemon, c *warden.Client, id, name, src string, port int) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.WriteFile(ctx, id, "/tmp/"+name, strings.NewReader(src), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd := fmt.Sprintf("nohup python3 /tmp/%s %d >/tmp/%s.log 2>&1 &", name, port, name)
	if out, errs, code := d.cli(t, "", "exec", id, "--", "sh", "-c", cmd); code != 0 {
		t.Fatalf("start %s: %d %s %s", name, code, out, errs)
	}
	u := fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/proxy/", d.url, id, port)
	for i := 0; ; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+d.adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				return
			}
		}
		if i > 300 {
			t.Fatalf("%s never answered on port %d: %v", name, port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecPreviewCredentials: whatever repetitions and spellings a client
// uses, the program behind a preview port sees none of the daemon's
// credentials (API keys, envd token, preview token and cookie), and still
// sees its own Authorization.
func TestSecPreviewCredentials(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--preview-domain", "preview.test")
	ctx := ctxT(t)
	c := d.client(t, d.adminKey)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	lnStartProgram(t, d, c, sb.ID, "echo.py", lnEchoHeaders, 8000)
	prev, err := c.PreviewURL(ctx, sb.ID, 8000, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := prev.URL[strings.Index(prev.URL, "warden_token=")+len("warden_token="):]
	agent, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "other", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"admin key": d.adminKey, "other key": other.Key, "preview token": tok,
		"envd token": "envd-token-value", "proxy credentials": "cHJveHk6cGFzcw"}
	hostile := "Authorization: Basic dTpw\r\n" + // the program's own: kept
		"authorization: Bearer " + other.Key + "\r\n" +
		"AUTHORIZATION: bearer   " + d.adminKey + "\r\n" +
		"Authorization: " + d.adminKey + "\r\n" +
		"X-API-Key: " + d.adminKey + "\r\n" +
		"x_api_key: " + other.Key + "\r\n" +
		"X-Access-Token: envd-token-value\r\n" +
		"x_access_token: envd-token-value\r\n" +
		"Proxy-Authorization: Basic cHJveHk6cGFzcw\r\n" +
		"Proxy_Authorization: Basic cHJveHk6cGFzcw\r\n" +
		"Cookie: theirs=1; warden_preview=" + tok + "\r\n" +
		"Cookie: Warden_Preview=" + tok + "\r\n" +
		"Connection: close\r\n\r\n"
	path := "/v1/sandboxes/" + sb.ID + "/ports/8000/proxy/echo?a=1&warden_token=" + tok + "&WARDEN_TOKEN=" + tok
	addr := strings.TrimPrefix(d.url, "http://")
	check := func(name, req string) {
		t.Helper()
		resp, body, err := lnRawExchange(lnDialFrom(t, "127.0.0.1", addr), req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %q %v", name, resp, body, err)
		}
		for what, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s: the program saw the %s:\n%s", name, what, body)
			}
		}
		if !strings.Contains(body, "Basic dTpw") || !strings.Contains(body, "theirs=1") || !strings.Contains(body, "?a=1") {
			t.Errorf("%s: the program's own credentials did not pass:\n%s", name, body)
		}
	}
	// Authorized by the token in the query (the first Authorization is
	// not a Warden key).
	check("token, by path", "GET "+path+" HTTP/1.1\r\nHost: x\r\n"+hostile)
	check("token, by host", "GET /echo?a=1&warden_token="+tok+" HTTP/1.1\r\nHost: 8000-"+sb.ID+".preview.test\r\n"+hostile)
	// Authorized by a key in the first Authorization header.
	check("key", "GET /v1/sandboxes/"+sb.ID+"/ports/8000/proxy/echo?a=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+d.adminKey+"\r\n"+hostile)
	// A public port.
	if _, err := c.PublishPort(ctx, sb.ID, 8000, true); err != nil {
		t.Fatal(err)
	}
	check("public", "GET "+path+" HTTP/1.1\r\nHost: x\r\n"+hostile)
}

// TestSecMetrics: GET /metrics needs an API key with metrics:read, and
// names no sandbox unless the operator asks for per-sandbox labels; the
// separate metrics listener serves without a key.
func TestSecMetrics(t *testing.T) {
	state, run := newDirs(t)
	metricsAddr := freePort(t)
	d := startDaemon(t, state, run, "--metrics-listen", metricsAddr)
	ctx := ctxT(t)
	c := d.client(t, d.adminKey)
	get := func(base, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(d.url, ""); st != 401 || !strings.Contains(body, `"code":"unauthenticated"`) {
		t.Fatalf("no key: %d %q", st, body)
	}
	p, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "scraper"})
	if err != nil {
		t.Fatal(err)
	}
	noScope, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "sandboxes", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	scraper, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "scraper", Scopes: []string{warden.ScopeMetricsRead}})
	if err != nil {
		t.Fatal(err)
	}
	if st, body := get(d.url, noScope.Key); st != 403 || !strings.Contains(body, "metrics:read") {
		t.Fatalf("key without metrics:read: %d %q", st, body)
	}
	// A sandbox with a network, whose counters are per sandbox.
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 300,
		Network: &warden.NetworkPolicy{Mode: "allowlist", Allow: []warden.NetworkRule{{Host: "example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st, body := get(d.url, scraper.Key)
	if st != 200 || !strings.Contains(body, "warden_sandboxes{") {
		t.Fatalf("with metrics:read: %d %q", st, body)
	}
	network := strings.Contains(body, "warden_network_bytes_total")
	if !network {
		t.Log("LOUD: no warden_network_* series: sandbox networking is unavailable here, so the sandbox-id check covers only the other series")
	}
	if strings.Contains(body, sb.ID) {
		t.Fatalf("/metrics names sandbox %s:\n%s", sb.ID, body)
	}
	if st, body := get("http://"+metricsAddr, ""); st != 200 || !strings.Contains(body, "warden_sandboxes{") || strings.Contains(body, sb.ID) {
		t.Fatalf("metrics listener: %d %q", st, body)
	}
	if st, _ := get("http://"+metricsAddr+"/v1", ""); st != 404 {
		t.Fatalf("the metrics listener serves more than /metrics: %d", st)
	}

	// The operator asks for per-sandbox labels: the id appears (which
	// shows the check above can see one).
	d.stop(syscall.SIGTERM)
	d = startDaemon(t, state, run, "--config", lnWriteConfig(t, "metrics:\n  per_sandbox_labels: true\n"))
	st, body = get(d.url, scraper.Key)
	if st != 200 {
		t.Fatalf("per-sandbox labels: %d %q", st, body)
	}
	if network && !strings.Contains(body, `sandbox="`+sb.ID+`"`) {
		t.Fatalf("per_sandbox_labels: true, but no series names %s:\n%s", sb.ID, body)
	}
}

// lnWSEcho is a program for the sandbox: it accepts WebSocket upgrades and
// holds them until the client closes.
const lnWSEcho = `
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() != "websocket":
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        while self.rfile.read(1):
            pass
        self.close_connection = True

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestSecPreviewWebSocketCaps: with caps of 3 upgrades per port and 2 per
// client, a public port refuses the extra ones with JSON before upgrading,
// and takes new ones after some close.
func TestSecPreviewWebSocketCaps(t *testing.T) {
	state, run := newDirs(t)
	cfg := lnWriteConfig(t, "limits:\n  preview_websockets_per_port: 3\n  preview_websockets_per_client: 2\n")
	d := startDaemon(t, state, run, "--config", cfg)
	ctx := ctxT(t)
	c := d.client(t, d.adminKey)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	lnStartProgram(t, d, c, sb.ID, "ws.py", lnWSEcho, 8000)
	if _, err := c.PublishPort(ctx, sb.ID, 8000, true); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(d.url, "http://")
	upgrade := "GET /v1/sandboxes/" + sb.ID + "/ports/8000/proxy/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	open := func(src string) (net.Conn, int, string) {
		t.Helper()
		conn := lnDialFrom(t, src, addr)
		resp, body, err := lnRawExchange(conn, upgrade)
		if err != nil {
			t.Fatalf("upgrade from %s: %v", src, err)
		}
		return conn, resp.StatusCode, body
	}
	a1, st1, _ := open("127.0.0.2")
	_, st2, _ := open("127.0.0.2")
	if st1 != 101 || st2 != 101 {
		t.Fatalf("two upgrades from one client: %d %d", st1, st2)
	}
	if _, st, body := open("127.0.0.2"); st != 429 || !strings.Contains(body, `"code":"rate_limited"`) {
		t.Fatalf("a third from the same client: %d %q, want 429 rate_limited", st, body)
	}
	if _, st, _ := open("127.0.0.3"); st != 101 {
		t.Fatalf("another client: %d", st)
	}
	if _, st, body := open("127.0.0.4"); st != 503 || !strings.Contains(body, `"code":"unavailable"`) {
		t.Fatalf("a fourth to the port: %d %q, want 503 unavailable", st, body)
	}
	// Plain requests are not upgrades: served.
	if resp, body, err := lnRawExchange(lnDialFrom(t, "127.0.0.2", addr), "GET /v1/sandboxes/"+sb.ID+"/ports/8000/proxy/ HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("plain request beside held upgrades: %v %q %v", resp, body, err)
	}
	a1.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, st, _ := open("127.0.0.2")
		if st == 101 {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("still refused 30 s after closing an upgrade: %d", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
