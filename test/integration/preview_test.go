package integration

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestPreview drives port previews through the real wardend with
// --preview-domain and the CLI: a signed URL by host and by path, a public
// port, and what a daemon restart keeps (signed URLs: the presign key is on
// disk) and forgets (public ports: every port is private again).
func TestPreview(t *testing.T) {
	for _, iso := range []string{"native", "gvisor"} {
		t.Run(iso, func(t *testing.T) { testPreview(t, iso) })
	}
}

func testPreview(t *testing.T, iso string) {
	state, run := newDirs(t)
	if iso == "gvisor" {
		t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	}
	d := startDaemon(t, state, run, "--preview-domain", "preview.test")
	ctx := ctxT(t)
	c := d.client(t, d.adminKey)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/www/index.html", strings.NewReader("preview works\n"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := d.cli(t, "", "exec", sb.ID, "--", "sh", "-c", "cd /tmp/www && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("start the server: %d %s %s", code, out, errs)
	}
	addr := strings.TrimPrefix(d.url, "http://")
	port := addr[strings.LastIndex(addr, ":"):]

	// get fetches u from the daemon whatever its host, with that Host.
	get := func(u string) (int, string) {
		t.Helper()
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+p.RequestURI(), nil)
		req.Host = p.Host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	out, errs, code := d.cli(t, "", "sandbox", "url", sb.ID, "8000", "--ttl", "10m")
	signed := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(signed, "http://8000-"+sb.ID+".preview.test"+port+"/?warden_token=") {
		t.Fatalf("sandbox url: %d %q %s", code, out, errs)
	}
	for i := 0; ; i++ { // the server may still be starting
		st, body := get(signed)
		if st == 200 && body == "preview works\n" {
			break
		}
		if st != http.StatusBadGateway || i > 100 {
			t.Fatalf("signed URL by host: %d %q", st, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	byPath := d.url + "/v1/sandboxes/" + sb.ID + "/ports/8000/proxy/"
	if st, body := get(byPath); st != 401 || !strings.Contains(body, `"unauthenticated"`) {
		t.Fatalf("no token: %d %q", st, body)
	}

	out, errs, code = d.cli(t, "", "sandbox", "url", sb.ID, "8000", "--public")
	if code != 0 || strings.TrimSpace(out) != "http://8000-"+sb.ID+".preview.test"+port+"/" {
		t.Fatalf("sandbox url --public: %d %q %s", code, out, errs)
	}
	if st, body := get(byPath); st != 200 || body != "preview works\n" {
		t.Fatalf("public by path: %d %q", st, body)
	}

	// Restart: the sandbox is re-attached, the public port is private
	// again, the signed URL still works.
	d.stop(syscall.SIGTERM)
	d = startDaemon(t, state, run, "--preview-domain", "preview.test")
	if st, body := get(byPath); st != 401 {
		t.Errorf("public port after a restart: %d %q", st, body)
	}
	if st, body := get(signed); st != 200 || body != "preview works\n" {
		t.Errorf("signed URL after a restart: %d %q", st, body)
	}
	if st, body := get(strings.Replace(signed, "8000-", "8001-", 1)); st != 403 {
		t.Errorf("the token on another port: %d %q", st, body)
	}
}
