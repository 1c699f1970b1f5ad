package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// cliKey runs the real CLI against the daemon with the given API key.
func (d *daemon) cliKey(t *testing.T, key, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "warden"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "WARDEN_URL=" + d.url, "WARDEN_API_KEY=" + key, "HOME=" + t.TempDir()}
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run warden %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// TestFirstCLI2 drives the real CLI against the real daemon, one row per behaviour of
// issue 16's remaining CLI items: own-sandbox scopes, keys:manage, audit targets and
// views, shell completion.
func TestFirstCLI2(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)

	// agent makes a principal with one key holding scopes.
	agent := func(t *testing.T, name string, scopes ...string) (pid, key string) {
		t.Helper()
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID, k.Key
	}
	out, errb, code := d.cli(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errb)
	}
	adminSB := strings.TrimSpace(out)
	_, creatorKey := agent(t, "creator", "sandboxes:create")

	rows := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"scopes: sandboxes:create alone lists, inspects and kills its own sandboxes", func(t *testing.T) {
			out, errb, code := d.cliKey(t, creatorKey, "", "sandbox", "create")
			if code != 0 {
				t.Fatalf("create: %d %s", code, errb)
			}
			own := strings.TrimSpace(out)
			out, errb, code = d.cliKey(t, creatorKey, "", "sandbox", "ls", "-q")
			if code != 0 || !strings.Contains(out, own) || strings.Contains(out, adminSB) {
				t.Errorf("ls -q: %d %q %q (own %s, admin's %s)", code, out, errb, own, adminSB)
			}
			if out, errb, code = d.cliKey(t, creatorKey, "", "sandbox", "inspect", own); code != 0 || !strings.Contains(out, own) {
				t.Errorf("inspect own: %d %q %q", code, out, errb)
			}
			if _, errb, code = d.cliKey(t, creatorKey, "", "sandbox", "inspect", adminSB); code == 0 || !strings.Contains(errb, "not found") {
				t.Errorf("inspect another's: %d %q", code, errb)
			}
			if _, errb, code = d.cliKey(t, creatorKey, "", "sandbox", "kill", adminSB); code == 0 {
				t.Errorf("kill another's: %d %q", code, errb)
			}
			if sb, err := admin.GetSandbox(ctx, adminSB); err != nil || sb.State != "running" {
				t.Fatalf("admin's sandbox after a refused kill: %v %v", sb.State, err)
			}
			if _, errb, code = d.cliKey(t, creatorKey, "", "sandbox", "kill", own); code != 0 {
				t.Errorf("kill own: %d %q", code, errb)
			}
			if sb, err := admin.GetSandbox(ctx, own); err != nil || sb.State == "running" {
				t.Errorf("own sandbox after kill: %v %v", sb.State, err)
			}
		}},
		{"keys:manage: own principal's keys, no scope it lacks", func(t *testing.T) {
			pid, key := agent(t, "keymgr", "keys:manage", "sandboxes:create")
			out, errb, code := d.cliKey(t, key, "", "keys", "create", "--name", "sub", "--scope", "sandboxes:create", "--json")
			var ck warden.CreatedKey
			if code != 0 || json.Unmarshal([]byte(out), &ck) != nil || ck.APIKey.PrincipalID != pid {
				t.Fatalf("create a key with a scope it holds: %d %q %q", code, out, errb)
			}
			if _, errb, code = d.cliKey(t, key, "", "keys", "create", "--scope", "admin"); code == 0 || !strings.Contains(errb, "scope admin") {
				t.Errorf("create an admin key: %d %q", code, errb)
			}
			if _, errb, code = d.cliKey(t, key, "", "keys", "create", "--principal", "pr-someoneelse0000", "--scope", "sandboxes:create"); code == 0 {
				t.Errorf("create a key for another principal: %d %q", code, errb)
			}
			out, errb, code = d.cliKey(t, key, "", "keys", "ls", "--json")
			var keys []warden.APIKey
			if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys) != 2 {
				t.Fatalf("keys ls: %d %q %q", code, out, errb)
			}
			for _, k := range keys {
				if k.PrincipalID != pid {
					t.Errorf("keys ls shows %s of %s", k.ID, k.PrincipalID)
				}
			}
			adminKeys, err := admin.ListKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var other string
			for _, k := range adminKeys {
				if k.PrincipalID != pid {
					other = k.ID
				}
			}
			if _, errb, code = d.cliKey(t, key, "", "keys", "revoke", other); code == 0 || !strings.Contains(errb, "not found") {
				t.Errorf("revoke another principal's key %s: %d %q", other, code, errb)
			}
			if _, errb, code = d.cliKey(t, key, "", "keys", "revoke", ck.APIKey.ID); code != 0 {
				t.Errorf("revoke own key: %d %q", code, errb)
			}
		}},
		{"audit: a call refused for its scope keeps its target", func(t *testing.T) {
			if _, errb, code := d.cliKey(t, creatorKey, "", "fs", "cat", adminSB, "/etc/hostname"); code == 0 || !strings.Contains(errb, "files:read") {
				t.Fatalf("fs cat without files:read: %d %q", code, errb)
			}
			page, err := admin.ListAudit(ctx, warden.AuditQuery{Target: adminSB, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, ev := range page.Events {
				found = found || (ev.Action == "file.read" && ev.Outcome == "denied")
			}
			if !found {
				t.Errorf("no denied file.read event with target %s in %+v", adminSB, page.Events)
			}
		}},
		{"audit: warden cp into a sandbox records no failure", func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "hello.txt")
			if err := os.WriteFile(src, []byte("hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errb, code := d.cli(t, "", "sandbox", "create")
			if code != 0 {
				t.Fatalf("create: %d %s", code, errb)
			}
			id := strings.TrimSpace(out)
			if _, errb, code := d.cli(t, "", "cp", src, id+":/tmp/new-file"); code != 0 {
				t.Fatalf("cp: %d %s", code, errb)
			}
			page, err := admin.ListAudit(ctx, warden.AuditQuery{Target: id, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			wrote := false
			for _, ev := range page.Events {
				if ev.Outcome != "success" {
					t.Errorf("event %d %s: outcome %s (%s)", ev.Seq, ev.Action, ev.Outcome, ev.Detail)
				}
				wrote = wrote || ev.Action == "file.write"
			}
			if !wrote {
				t.Errorf("no file.write event: %+v", page.Events)
			}
			admin.KillSandbox(ctx, id)
		}},
		{"audit ls: principal names and times to the second", func(t *testing.T) {
			me, err := admin.Whoami(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out, errb, code := d.cli(t, "", "audit", "ls", "--target", adminSB)
			want := me.Principal.Name + " (" + me.Principal.ID + ")"
			if code != 0 || !strings.Contains(out, want) || !regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`).MatchString(out) {
				t.Errorf("audit ls: %d, want %q and seconds in\n%s%s", code, want, out, errb)
			}
		}},
		{"completion: bash completes commands and the daemon's sandbox IDs", func(t *testing.T) {
			script, errb, code := d.cli(t, "", "completion", "bash")
			if code != 0 {
				t.Fatalf("completion bash: %d %s", code, errb)
			}
			f := filepath.Join(t.TempDir(), "warden.bash")
			if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			complete := func(words string, cword int) string {
				cmd := exec.Command("bash", "--norc", "-c", "source "+f+"\nCOMP_WORDS=("+words+")\nCOMP_CWORD="+
					string(rune('0'+cword))+"\n_warden\necho \"${COMPREPLY[*]}\"")
				cmd.Env = []string{"PATH=" + binDir + ":/usr/bin:/bin", "WARDEN_URL=" + d.url, "WARDEN_API_KEY=" + d.adminKey, "HOME=" + t.TempDir()}
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("bash: %v", err)
				}
				return strings.TrimSpace(string(out))
			}
			if got := complete("warden exec ''", 2); !strings.Contains(got, adminSB) {
				t.Errorf("warden exec <TAB>: %q, want %s among them", got, adminSB)
			}
			if got := complete("warden sandbox pa", 2); got != "pause" {
				t.Errorf("warden sandbox pa<TAB>: %q", got)
			}
		}},
	}
	for _, row := range rows {
		t.Run(row.name, row.fn)
	}
}
