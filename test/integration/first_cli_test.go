package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestFirstCLI drives the real CLI against the real daemon, one row per behaviour of
// issue 16's "CLI and errors as people expect".
func TestFirstCLI(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)

	mk := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errb, code := d.cli(t, "", append([]string{"sandbox", "create"}, args...)...)
		if code != 0 {
			t.Fatalf("create %v: %d %s", args, code, errb)
		}
		return strings.TrimSpace(out)
	}
	id := mk(t, "--meta", "who=first-cli")

	rows := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"units: --cpu 0.5 --memory 256m --disk 1g", func(t *testing.T) {
			sid := mk(t, "--cpu", "0.5", "--memory", "256m", "--disk", "1g")
			sb, err := admin.GetSandbox(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if sb.CPUMillis != 500 || sb.MemoryMB != 256 || sb.DiskMB != 1024 {
				t.Errorf("limits %d millis, %d MiB, %d MiB disk", sb.CPUMillis, sb.MemoryMB, sb.DiskMB)
			}
			admin.KillSandbox(ctx, sid)
		}},
		{"units: an out-of-range value names the flag", func(t *testing.T) {
			_, errb, code := d.cli(t, "", "sandbox", "create", "--cpu", "5000")
			if code == 0 || !strings.Contains(errb, "--cpu") || strings.Contains(errb, "cpu_millis") {
				t.Errorf("code %d stderr %q", code, errb)
			}
		}},
		{"exec: a missing executable exits 127", func(t *testing.T) {
			_, errb, code := d.cli(t, "", "exec", id, "--", "no-such-program-here")
			if code != 127 || strings.Contains(errb, "sandbox ls") {
				t.Errorf("code %d stderr %q", code, errb)
			}
		}},
		{"permission inside the sandbox: own code, --user remedy", func(t *testing.T) {
			if _, errb, code := d.cli(t, "secret\n", "cp", "--user", "root", "-", id+":/root/only-root"); code != 0 {
				t.Fatalf("cp --user root: %d %s", code, errb)
			}
			_, errb, code := d.cli(t, "", "fs", "cat", id, "/root/only-root")
			if code != 1 || !strings.Contains(errb, "permission_denied") || !strings.Contains(errb, "--user") || strings.Contains(errb, "scope") {
				t.Errorf("fs cat as the sandbox user: %d %q", code, errb)
			}
			out, errb, code := d.cli(t, "", "fs", "cat", "--user", "root", id, "/root/only-root")
			if code != 0 || out != "secret\n" {
				t.Errorf("fs cat --user root: %d %q %q", code, out, errb)
			}
		}},
		{"hints: a missing template is not a sandbox", func(t *testing.T) {
			_, errb, code := d.cli(t, "", "template", "inspect", "no-such-template")
			if code == 0 || strings.Contains(errb, "sandbox ls") {
				t.Errorf("code %d stderr %q", code, errb)
			}
		}},
		{"exec --json", func(t *testing.T) {
			out, errb, code := d.cli(t, "", "exec", "--json", id, "--", "sh", "-c", "echo hi; echo oops >&2; exit 3")
			var got struct {
				Stdout, Stderr string
				ExitCode       int `json:"exit_code"`
			}
			if code != 3 || json.Unmarshal([]byte(out), &got) != nil || got.Stdout != "hi\n" || got.Stderr != "oops\n" || got.ExitCode != 3 {
				t.Errorf("code %d out %q err %q", code, out, errb)
			}
		}},
		{"exec -it with arguments and piped stdin ends", func(t *testing.T) {
			out, errb, code := d.cli(t, "hello\n", "exec", "-it", id, "--", "sh", "-c", "read l; echo got:$l")
			if code != 0 || !strings.Contains(out, "got:hello") {
				t.Errorf("code %d out %q err %q", code, out, errb)
			}
			// Input without a final newline still ends: cat sees end of file.
			out, errb, code = d.cli(t, "abc", "exec", "-it", id, "--", "cat")
			if code != 0 || !strings.Contains(out, "abc") {
				t.Errorf("cat: code %d out %q err %q", code, out, errb)
			}
		}},
		{"ls: live by default, -a for all; kill --meta; pause and resume many", func(t *testing.T) {
			a := mk(t, "--meta", "batch=ls")
			b := mk(t, "--meta", "batch=ls")
			dead := mk(t)
			if _, errb, code := d.cli(t, "", "sandbox", "kill", dead); code != 0 {
				t.Fatalf("kill: %s", errb)
			}
			if out, errb, code := d.cli(t, "", "sandbox", "pause", a, b); code != 0 || strings.Count(out, "paused") != 2 {
				t.Fatalf("pause a b: %d %q %q", code, out, errb)
			}
			out, _, _ := d.cli(t, "", "sandbox", "ls", "-q")
			if !strings.Contains(out, a) || !strings.Contains(out, b) || strings.Contains(out, dead) {
				t.Errorf("ls: %q (want %s %s, not %s)", out, a, b, dead)
			}
			if out, _, _ := d.cli(t, "", "sandbox", "ls", "-a", "-q"); !strings.Contains(out, dead) {
				t.Errorf("ls -a misses the killed sandbox: %q", out)
			}
			if out, errb, code := d.cli(t, "", "sandbox", "resume", a, b); code != 0 || strings.Count(out, "running") != 2 {
				t.Fatalf("resume a b: %d %q %q", code, out, errb)
			}
			out, errb, code := d.cli(t, "", "sandbox", "kill", "--meta", "batch=ls")
			if code != 0 || !strings.Contains(out, a) || !strings.Contains(out, b) || strings.Contains(out, id) {
				t.Errorf("kill --meta: %d %q %q", code, out, errb)
			}
			if sb, _ := admin.GetSandbox(ctx, id); sb.State != warden.StateRunning {
				t.Errorf("kill --meta touched %s: %s", id, sb.State)
			}
		}},
		{"--principal takes a name", func(t *testing.T) {
			if _, errb, code := d.cli(t, "", "principals", "create", "--kind", "agent", "first-cli-bot"); code != 0 {
				t.Fatalf("principals create: %s", errb)
			}
			out, errb, code := d.cli(t, "", "keys", "create", "--principal", "first-cli-bot", "--scope", "sandboxes:read")
			if code != 0 || strings.TrimSpace(out) == "" {
				t.Errorf("keys create --principal NAME: %d %q %q", code, out, errb)
			}
			_, errb, code = d.cli(t, "", "keys", "create", "--principal", "nobody-by-that-name", "--scope", "sandboxes:read")
			if code == 0 || !strings.Contains(errb, "principals ls") {
				t.Errorf("unknown principal name: %d %q", code, errb)
			}
		}},
		{"template import of a missing file says so", func(t *testing.T) {
			_, errb, code := d.cli(t, "", "template", "import", "./missing.tar", "-t", "x")
			if code != 1 || !strings.Contains(errb, "no such file") {
				t.Errorf("code %d stderr %q", code, errb)
			}
		}},
		{"interactive session whose sandbox dies", func(t *testing.T) {
			sid := mk(t)
			type res struct {
				errb string
				code int
			}
			done := make(chan res, 1)
			go func() {
				// stdin never ends before the kill: a pipe held open.
				_, errb, code := d.cliOpenStdin(t, "exec", "-it", sid, "--", "sleep", "300")
				done <- res{errb, code}
			}()
			// Let the session start, then kill its sandbox.
			deadline := time.Now().Add(20 * time.Second)
			for {
				ps, err := admin.Processes(ctx, sid)
				if err == nil && len(ps) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the session did not start")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := admin.KillSandbox(ctx, sid); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.code == 0 || !strings.Contains(r.errb, "sandbox "+sid+" ended") || strings.Contains(strings.ToLower(r.errb), "websocket") {
					t.Errorf("code %d stderr %q", r.code, r.errb)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the session did not end with its sandbox")
			}
		}},
	}
	for _, row := range rows {
		t.Run(row.name, row.fn)
	}
}

// cliOpenStdin runs the CLI with a stdin that stays open until the command ends.
func (d *daemon) cliOpenStdin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", err.Error(), -1
	}
	defer pw.Close()
	defer pr.Close()
	cmd := cliCmd(t, d, args...)
	cmd.Stdin = pr
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	code = 0
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		return "", err.Error(), -1
	}
	return o.String(), e.String(), code
}

// cliCmd is the command d.cli runs: the real CLI with the admin key.
func cliCmd(t *testing.T, d *daemon, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "warden"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "WARDEN_URL=" + d.url, "WARDEN_API_KEY=" + d.adminKey, "HOME=" + t.TempDir()}
	return cmd
}
