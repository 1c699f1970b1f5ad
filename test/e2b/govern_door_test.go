package e2bsdk

// Issue 19, the E2B door of the governed path: one policy, set through
// Warden's API, refuses the same actions the same way through the
// unmodified E2B SDK and through Warden's own API (the Go SDK).

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

const governScript = `
import { Sandbox } from 'e2b'
const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
try {
  try { await sbx.commands.run('git push --force'); console.log('FORCEPUSH ran') }
  catch (e) { console.log('FORCEPUSH', e.constructor.name, JSON.stringify(e.message)) }
  const ok = await sbx.commands.run('echo ok')
  console.log('ECHO', JSON.stringify(ok.stdout))
  try { await sbx.files.write('/etc/x', 'no'); console.log('ETCWRITE wrote') }
  catch (e) { console.log('ETCWRITE', e.constructor.name, JSON.stringify(e.message)) }
  await sbx.files.write('/tmp/fine', 'yes')
  console.log('TMPWRITE', await sbx.files.read('/tmp/fine'))
} finally {
  await sbx.kill()
}
`

var governPolicy = warden.PolicyWrite{ID: "doors", Scope: warden.PolicyScope{Kind: "installation"}, Rules: []warden.Rule{
	{ID: "no-force-push", Kinds: []string{"exec", "pty"}, Outcome: "deny", Message: "force pushes are not allowed",
		When: `exec.argv.matches("\\bgit\\s+push\\b.*\\s(-f|--force)\\b")`},
	{ID: "no-etc-writes", Kinds: []string{"file.write"}, Outcome: "deny", Message: "nothing is written under /etc",
		When: `file.path.startsWith("/etc/")`},
}}

func TestE2BGovernedDoor(t *testing.T) {
	work, node := sdkWork(t, "gov")
	bin := filepath.Join(work, "bin")
	state, run := filepath.Join(work, "state"), filepath.Join(work, "run")
	apiAddr, e2bAddr := freePort(t), freePort(t)
	var log bytes.Buffer
	d := exec.Command(filepath.Join(bin, "wardend"), "--listen", apiAddr, "--socket", filepath.Join(run, "wardend.sock"),
		"--state-dir", state, "--run-dir", run, "--agent", filepath.Join(bin, "warden-agent"), "--pool-size", "0",
		"--e2b-listen", e2bAddr)
	d.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("wardend log:\n%s", log.String())
		}
	}()
	waitE2B(t, e2bAddr, &log)
	keyb, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyb))
	ctx, cancelAll := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelAll()
	wc, err := warden.New(warden.WithBaseURL("http://"+apiAddr), warden.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.CreatePolicy(ctx, governPolicy); err != nil {
		t.Fatalf("create policy: %v", err)
	}

	// The E2B door, through the unmodified SDK.
	os.WriteFile(filepath.Join(work, "govern.mjs"), []byte(governScript), 0o644)
	cmd := exec.CommandContext(ctx, node, "govern.mjs")
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
		"E2B_API_URL=http://" + e2bAddr, "E2B_SANDBOX_URL=http://" + e2bAddr, "E2B_API_KEY=" + key}
	out, err := cmd.CombinedOutput()
	t.Logf("node govern.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the E2B SDK script failed: %v", err)
	}
	for _, want := range []string{
		`FORCEPUSH SandboxError "7: [permission_denied] denied by policy: force pushes are not allowed"`,
		`ECHO "ok\n"`,
		`ETCWRITE SandboxError "403: denied by policy: nothing is written under /etc"`,
		"TMPWRITE yes",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("E2B output lacks %q", want)
		}
	}

	// The native door: the same rules, the same messages.
	sb, err := wc.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	defer wc.KillSandbox(context.Background(), sb.ID)
	_, err = wc.Exec(ctx, sb.ID, warden.ExecRequest{Command: "git push --force"}, warden.ExecIO{})
	if err == nil || !strings.Contains(err.Error(), "denied by policy: force pushes are not allowed") {
		t.Errorf("native exec of a force push: %v", err)
	}
	_, err = wc.WriteFile(ctx, sb.ID, "/etc/x", strings.NewReader("no"), warden.WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied by policy: nothing is written under /etc") {
		t.Errorf("native write under /etc: %v", err)
	}
}
