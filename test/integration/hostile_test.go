package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestHostileThroughDaemon covers the hostile inputs that need a real daemon
// and a sandbox (the API package's table holds 61 more): symlinks the sandbox
// made pointing outside, oversized headers, and the daemon staying healthy.
func TestHostileThroughDaemon(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox plants links to "/" and to the agent's root and cwd.
	if res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "ln -s / /home/user/r; ln -s /proc/1/root /home/user/p1; ln -s /proc/1/cwd /home/user/c1"}, warden.ExecIO{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("plant links: %+v %v", res, err)
	}
	hostShadow, _ := os.ReadFile("/etc/shadow")
	for _, p := range []string{"/home/user/r/etc/shadow", "/home/user/p1/etc/shadow", "/home/user/c1/etc/shadow"} {
		for _, user := range []string{"", "root"} {
			r, err := c.ReadFile(ctx, sb.ID, p, warden.ReadOptions{User: user})
			if err != nil {
				var we *warden.Error
				if !errors.As(err, &we) || we.Status < 400 || we.Status >= 500 {
					t.Errorf("read %s as %q: %v, want a 4xx or the sandbox's own file", p, user, err)
				}
				continue
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if len(hostShadow) > 0 && bytes.Equal(b, hostShadow) {
				t.Fatalf("read %s as %q returned the host's /etc/shadow", p, user)
			}
		}
	}
	// A write through the link lands inside the sandbox, never on the host.
	marker := "/tmp/warden-hostile-" + sb.ID
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/r"+marker, strings.NewReader("x"), warden.WriteOptions{User: "root"}); err != nil {
		t.Fatalf("write through link: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		os.Remove(marker)
		t.Fatal("a write through the sandbox's link to / reached the host")
	}
	if e, err := c.Stat(ctx, sb.ID, marker); err != nil || e.Size != 1 {
		t.Fatalf("the write should be inside the sandbox: %+v %v", e, err)
	}
	// Oversized headers: a JSON 4xx, then the daemon still serves.
	req, _ := http.NewRequest("GET", d.url+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	req.Header.Set("X-Padding", strings.Repeat("a", 48<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 413 || body.Error.Code != "payload_too_large" {
		t.Fatalf("oversized header: %d %q", resp.StatusCode, body.Error.Code)
	}
	req.Header.Set("X-Padding", strings.Repeat("a", 2<<20)) // past the server's own limit
	if resp, err := http.DefaultClient.Do(req); err == nil {
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Fatalf("2 MiB header: %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("daemon unhealthy after hostile input: %v", err)
	}
}

// TestSlowClient: a client that never finishes its headers is disconnected
// after the header timeout, and the daemon keeps serving others meanwhile.
func TestSlowClient(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--header-timeout", "1s")
	addr := strings.TrimPrefix(d.url, "http://")
	var conns []net.Conn
	for i := 0; i < 20; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A request line and one header, then nothing more (slowloris).
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	// Others are served while the slow clients hang.
	if resp, err := http.Get(d.url + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz beside slow clients: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		for err == nil {
			var m int
			m, err = conn.Read(buf[n:])
			n += m
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("slow client %d still connected after 5 s (header timeout 1 s)", i)
		}
	}
}
