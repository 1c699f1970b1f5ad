package integration

// Issue 15, items 4, 9 and 15: E2B signed URLs pin their user, the E2B proxy
// forwards only envd's own routes (never the agent's host-only ones), and
// envd tokens die with the API key they were issued through.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// e2bDaemon is a wardend with its E2B listener.
type e2bDaemon struct {
	*daemon
	e2b string // http://host:port
}

func startE2BDaemon(t *testing.T) *e2bDaemon {
	t.Helper()
	state, run := newDirs(t)
	addr := freePort(t)
	d := startDaemon(t, state, run, "--e2b-listen", addr)
	return &e2bDaemon{daemon: d, e2b: "http://" + addr}
}

// e2bCall sends a request to the E2B listener.
func e2bCall(t *testing.T, method, u string, hdr http.Header, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type e2bSandbox struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// e2bCreate creates a sandbox through the E2B API with key.
func (d *e2bDaemon) e2bCreate(t *testing.T, key string) e2bSandbox {
	t.Helper()
	st, b := e2bCall(t, "POST", d.e2b+"/v2/sandboxes", http.Header{"X-Api-Key": {key}, "Content-Type": {"application/json"}},
		strings.NewReader(`{"templateID":"base","timeout":600}`))
	if st != http.StatusCreated {
		t.Fatalf("e2b create: %d %s", st, b)
	}
	var sb e2bSandbox
	if err := json.Unmarshal(b, &sb); err != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("e2b create: %s (%v)", b, err)
	}
	return sb
}

// e2bConnect connects to a sandbox through the E2B API with key.
func (d *e2bDaemon) e2bConnect(t *testing.T, key, id string) e2bSandbox {
	t.Helper()
	st, b := e2bCall(t, "POST", d.e2b+"/v2/sandboxes/"+id+"/connect", http.Header{"X-Api-Key": {key}, "Content-Type": {"application/json"}},
		strings.NewReader(`{"timeout":600}`))
	if st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("e2b connect: %d %s", st, b)
	}
	var sb e2bSandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatalf("e2b connect: %s (%v)", b, err)
	}
	return sb
}

// signedURL builds a header-less signed /files URL as the E2B SDK does
// (downloadUrl/uploadUrl): v1_ + base64(sha256(path:op:user:token:exp)).
func (d *e2bDaemon) signedURL(path, op, user, token string) string {
	exp := time.Now().Add(10 * time.Minute).Unix()
	sum := sha256.Sum256([]byte(path + ":" + op + ":" + user + ":" + token + ":" + strconv.FormatInt(exp, 10)))
	q := url.Values{"path": {path}, "signature": {"v1_" + base64.RawStdEncoding.EncodeToString(sum[:])},
		"signature_expiration": {strconv.FormatInt(exp, 10)}}
	if user != "" {
		q.Set("username", user)
	}
	return d.e2b + "/files?" + q.Encode()
}

// envdHeaders routes to a sandbox's envd with its token.
func envdHeaders(id, token string) http.Header {
	return http.Header{"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {"49983"}, "X-Access-Token": {token}}
}

// envdList is a Connect call (process.Process/List) through the proxy.
func (d *e2bDaemon) envdList(t *testing.T, id, token string) (int, []byte) {
	t.Helper()
	h := envdHeaders(id, token)
	h.Set("Content-Type", "application/json")
	h.Set("Connect-Protocol-Version", "1")
	return e2bCall(t, "POST", d.e2b+"/process.Process/List", h, strings.NewReader("{}"))
}

func rootShell(t *testing.T, c *warden.Client, id, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := c.Exec(ctxT(t), id, warden.ExecRequest{Cmd: []string{"sh", "-c", script}, User: "root"}, warden.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q as root: %v exit %d: %s", script, err, res.ExitCode, errb.String())
	}
	return out.String()
}

// multipartFile is the E2B SDK's upload body: one part "file" whose
// filename is the destination path.
func multipartFile(t *testing.T, name, content string) (string, *bytes.Buffer) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(content))
	mw.Close()
	return mw.FormDataContentType(), &b
}

const rootBasic = "Basic cm9vdDo=" // root:

// TestSecE2BSignedURLPinsUser: a signed /files URL acts exactly as the user
// it was signed for. Signed with no user (as the SDK does when the caller
// names none) it is the sandbox's default user, whatever Authorization
// header or extra username parameter comes with it: a root-only file is
// not served (403), an upload lands owned by the default user and one
// into a root-only directory is refused. A URL signed for "user" used with
// a header naming root acts as "user"; one signed for root does read the
// file (the check is about the user, not something else failing).
func TestSecE2BSignedURLPinsUser(t *testing.T) {
	d := startE2BDaemon(t)
	c := d.client(t, d.adminKey)
	sb := d.e2bCreate(t, d.adminKey)
	rootShell(t, c, sb.SandboxID, "echo topsecret > /tmp/secret && chmod 600 /tmp/secret && mkdir -m 700 /rootonly")

	read := func(u string, hdr http.Header) (int, string) {
		st, b := e2bCall(t, "GET", u, hdr, nil)
		return st, string(b)
	}
	basic := http.Header{"Authorization": {rootBasic}}
	lower := http.Header{"authorization": {rootBasic}} // a spelling Go keeps as sent
	twice := http.Header{"Authorization": {rootBasic, rootBasic}, "Cookie": {"a=b"}}
	for _, hdr := range []http.Header{nil, basic, lower, twice} {
		u := d.signedURL("/tmp/secret", "read", "", sb.EnvdAccessToken)
		// As the default user: 403. A username=root added after the signed
		// (empty) one acts as the default user too; one replacing it no
		// longer matches the signature, and no sandbox is found (502).
		for target, want := range map[string]int{u: 403, strings.Replace(u, "/files?", "/files?username=&username=root&", 1): 403,
			u + "&username=root": 502} {
			st, body := read(target, hdr)
			if strings.Contains(body, "topsecret") || st != want {
				t.Errorf("user-less signed read of a root-only file, headers %v, url %s: %d %q; want %d without the content", hdr, target, st, body, want)
			}
		}
	}
	if st, body := read(d.signedURL("/tmp/secret", "read", "user", sb.EnvdAccessToken), basic); st != http.StatusForbidden || strings.Contains(body, "topsecret") {
		t.Errorf("signed for user, header naming root: %d %q; want 403", st, body)
	}
	if st, body := read(d.signedURL("/tmp/secret", "read", "root", sb.EnvdAccessToken), nil); st != http.StatusOK || !strings.Contains(body, "topsecret") {
		t.Fatalf("signed for root: %d %q; want the file", st, body)
	}

	// Uploads.
	upload := func(path, user string) int {
		ct, body := multipartFile(t, path, "written")
		st, _ := e2bCall(t, "POST", d.signedURL(path, "write", user, sb.EnvdAccessToken),
			http.Header{"Content-Type": {ct}, "Authorization": {rootBasic}, "authorization": {rootBasic}}, body)
		return st
	}
	if st := upload("/tmp/up.txt", ""); st != http.StatusOK {
		t.Fatalf("user-less signed upload: %d", st)
	}
	if owner := strings.TrimSpace(rootShell(t, c, sb.SandboxID, "stat -c %U /tmp/up.txt")); owner != "user" {
		t.Errorf("user-less signed upload with a root header landed owned by %q, want the default user", owner)
	}
	if st := upload("/rootonly/x", ""); st < 400 {
		t.Errorf("user-less signed upload into a root-only dir: %d, want refused", st)
	}
	if out := rootShell(t, c, sb.SandboxID, "ls -A /rootonly"); out != "" {
		t.Errorf("/rootonly holds %q after a refused upload", out)
	}
	if st := upload("/rootonly/y", "user"); st < 400 {
		t.Errorf("signed-for-user upload with a root header into a root-only dir: %d, want refused", st)
	}
}

// rawRequest sends one request with a verbatim request target (no client
// URL cleaning or re-encoding) and returns the status and body.
func rawRequest(t *testing.T, hostport, method, target string, hdr http.Header) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", hostport, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n", method, target, hostport)
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// hostOnlyTargets are request targets that must never reach an agent
// through the E2B proxy: the gVisor init's suspend route in every
// spelling, other /warden/ paths, and the agent's daemon-only routes.
var hostOnlyTargets = []string{
	"/warden/suspend", "//warden/suspend", "/%77arden/suspend", "/warden/../warden/suspend", "/warden/%2e%2e/warden/suspend",
	"/warden/suspend/", "/./warden/suspend", "/files/../warden/suspend", "/warden/resume", "/warden/",
	"/init", "/tar?path=/tmp", "/port?port=49983", "/port/connect?port=22", "/process.Process/../warden/suspend",
}

// TestSecE2BHostOnlyRoutes: the E2B proxy forwards only envd's routes.
// /warden/suspend and the agent's other daemon-only routes, in any
// spelling, get the proxy's own 404 on envd's port and on the code
// interpreter's, with a valid token, for a native and a gVisor sandbox;
// the sandbox serves exec afterwards (a gVisor agent that had been
// suspended would not answer any more).
func TestSecE2BHostOnlyRoutes(t *testing.T) {
	d := startE2BDaemon(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(d.runDir, "gvisor")) })
	c := d.client(t, d.adminKey)
	hostport := strings.TrimPrefix(d.e2b, "http://")
	for _, iso := range []string{"native", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if iso == "gvisor" {
				if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
					t.Skipf("SKIP (loud): runsc is not installed on this machine (scripts/install-deps.sh builds it); the gVisor half of this test did not run: %v", err)
				}
			}
			sb, err := c.CreateSandbox(ctxT(t), warden.CreateSandboxRequest{Isolation: iso, TimeoutSeconds: 600})
			if err != nil {
				t.Fatal(err)
			}
			tok := d.e2bConnect(t, d.adminKey, sb.ID)
			for _, port := range []string{"49983", "49999"} {
				hdr := http.Header{"E2b-Sandbox-Id": {sb.ID}, "E2b-Sandbox-Port": {port}, "X-Access-Token": {tok.EnvdAccessToken}}
				for _, target := range hostOnlyTargets {
					for _, method := range []string{"POST", "GET"} {
						st, body := rawRequest(t, hostport, method, target, hdr)
						if st != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
							t.Errorf("port %s: %s %s: %d %q; want the proxy's 404", port, method, target, st, body)
						}
					}
				}
			}
			if st, body := d.envdList(t, sb.ID, tok.EnvdAccessToken); st != http.StatusOK {
				t.Fatalf("envd List after the probes: %d %s", st, body)
			}
			var out bytes.Buffer
			res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"echo", "alive"}}, warden.ExecIO{Stdout: &out})
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != "alive" {
				t.Fatalf("exec after the probes: %v %+v %q", err, res, out.String())
			}
			if iso == "gvisor" {
				// The agent socket (what the daemon relays requests to) does
				// not serve the suspend route at all: only the init's own
				// control socket does.
				sock := filepath.Join(d.runDir, "gvisor", sb.ID, "control", "agent.sock")
				hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
					DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
						var dl net.Dialer
						return dl.DialContext(ctx, "unix", sock)
					}}}
				resp, err := hc.Post("http://agent/warden/suspend", "", nil)
				if err != nil {
					t.Fatalf("POST /warden/suspend on the agent socket: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("POST /warden/suspend on the agent socket: %d, want 404", resp.StatusCode)
				}
				// The daemon's own suspend channel still works: pause and resume.
				if _, err := c.PauseSandbox(ctxT(t), sb.ID); err != nil {
					t.Fatalf("pause: %v", err)
				}
				if _, err := c.ResumeSandbox(ctxT(t), sb.ID); err != nil {
					t.Fatalf("resume: %v", err)
				}
				out.Reset()
				if res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"echo", "alive"}}, warden.ExecIO{Stdout: &out}); err != nil || res.ExitCode != 0 {
					t.Fatalf("exec after pause and resume: %v %+v", err, res)
				}
			}
		})
	}
}

// TestSecE2BTokenDiesWithKey: the envd token of a sandbox created with key
// K works through the proxy (Connect and /files) and so does a URL signed
// with it; once K is revoked through the Warden API both get 401, while the
// sandbox keeps running and the owner's other key reaches it: through the
// Warden API, and through E2B connect, which hands out a new token (the old
// one stays dead).
func TestSecE2BTokenDiesWithKey(t *testing.T) {
	d := startE2BDaemon(t)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "e2b-bot"})
	if err != nil {
		t.Fatal(err)
	}
	scopes := []string{warden.ScopeSandboxesCreate, warden.ScopeSandboxesRead, warden.ScopeSandboxesExec, warden.ScopeSandboxesDelete,
		warden.ScopeFilesRead, warden.ScopeFilesWrite}
	k1, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "k1", Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "k2", Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	sb := d.e2bCreate(t, k1.Key)
	signed := d.signedURL("/etc/hostname", "read", "", sb.EnvdAccessToken)
	filesURL := d.e2b + "/files?path=/etc/hostname"
	// Once rebound, the old token is no sandbox's: a header-less signed URL
	// made with it finds none (502), routed ones get 401.
	rebound := false
	check := func(when string, want int) {
		t.Helper()
		if st, body := d.envdList(t, sb.SandboxID, sb.EnvdAccessToken); st != want {
			t.Errorf("%s: envd Connect with the token: %d %s, want %d", when, st, body, want)
		}
		if st, body := e2bCall(t, "GET", filesURL, envdHeaders(sb.SandboxID, sb.EnvdAccessToken), nil); st != want {
			t.Errorf("%s: /files with the token: %d %s, want %d", when, st, body, want)
		}
		signedWant := want
		if rebound {
			signedWant = http.StatusBadGateway
		}
		if st, body := e2bCall(t, "GET", signed, nil, nil); st != signedWant {
			t.Errorf("%s: signed URL made before: %d %s, want %d", when, st, body, signedWant)
		}
		// The same signed URL routed by headers to the sandbox: 401.
		if st, body := e2bCall(t, "GET", signed, http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "E2b-Sandbox-Port": {"49983"}}, nil); st != want {
			t.Errorf("%s: signed URL with routing headers: %d %s, want %d", when, st, body, want)
		}
	}
	check("before revocation", http.StatusOK)
	if err := admin.RevokeKey(ctx, k1.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	check("after revoking the key", http.StatusUnauthorized)

	// The sandbox is the principal's: still running, reachable with k2.
	c2 := d.client(t, k2.Key)
	var out bytes.Buffer
	if res, err := c2.Exec(ctx, sb.SandboxID, warden.ExecRequest{Cmd: []string{"echo", "still"}}, warden.ExecIO{Stdout: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec with the owner's other key: %v %+v", err, res)
	}
	again := d.e2bConnect(t, k2.Key, sb.SandboxID)
	if again.EnvdAccessToken == "" || again.EnvdAccessToken == sb.EnvdAccessToken {
		t.Fatalf("connect with the other key: token %q (old %q), want a new one", again.EnvdAccessToken, sb.EnvdAccessToken)
	}
	if st, body := d.envdList(t, sb.SandboxID, again.EnvdAccessToken); st != http.StatusOK {
		t.Errorf("new token: %d %s", st, body)
	}
	rebound = true
	check("after reconnecting with another key", http.StatusUnauthorized)
}
