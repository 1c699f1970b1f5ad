package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGovernanceCLI drives `warden policy` and `warden approvals` through the
// real CLI and daemon: create from YAML, a bad condition refused with its
// line and column, ls, show, edit (a new version), show --version, rm, a dry
// run against recorded execs, and approvals ls on an empty set.
func TestGovernanceCLI(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errb, code := d.cli(t, "", args...)
		if code != 0 {
			t.Fatalf("warden %s: exit %d: %s%s", strings.Join(args, " "), code, out, errb)
		}
		return out
	}

	// Recorded history: execs whose audit events a draft can replay.
	sb, err := admin.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"echo", "hello"}, {"rm", "-rf", "/tmp/x"}, {"rm", "-f", "/tmp/y"}} {
		if _, err := admin.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: argv}, warden.ExecIO{}); err != nil {
			t.Fatalf("exec %v: %v", argv, err)
		}
	}

	good := write("good.yaml", `id: no-rm
name: No rm in CI
scope: {kind: installation}
rules:
  - id: deny-rm
    kinds: [exec]
    when: 'exec.cmd == "rm"'
    outcome: deny
    message: rm is not allowed
`)
	if out := cli("policy", "create", "-f", good); strings.TrimSpace(out) != "no-rm version 1" {
		t.Errorf("create printed %q", out)
	}

	bad := write("bad.yaml", `id: typo
scope: {kind: installation}
rules:
  - id: r1
    kinds: [exec]
    when: |
      exec.cmd == "rm" &&
        exec.comand == "x"
    outcome: deny
`)
	out, errb, code := d.cli(t, "", "policy", "create", "-f", bad)
	if code == 0 || !strings.Contains(errb, "rule r1") || !strings.Contains(errb, "line 2, column") || !strings.Contains(errb, "comand") {
		t.Errorf("bad CEL: exit %d, stdout %q, stderr %q; want an error naming rule r1, line 2 and the column", code, out, errb)
	}
	unknown := write("unknown.yaml", "id: u\nscope: {kind: installation}\nrulez: []\n")
	if _, errb, code := d.cli(t, "", "policy", "create", "-f", unknown); code == 0 || !strings.Contains(errb, "rulez") {
		t.Errorf("unknown field: exit %d, stderr %q", code, errb)
	}

	if ls := cli("policy", "ls"); !strings.Contains(ls, "no-rm") || !strings.Contains(ls, "installation") || strings.Contains(ls, "typo") {
		t.Errorf("policy ls:\n%s", ls)
	}
	if show := cli("policy", "show", "no-rm"); !strings.Contains(show, "# version 1") || !strings.Contains(show, `exec.cmd == "rm"`) {
		t.Errorf("policy show:\n%s", show)
	}

	edited := write("edited.yaml", `id: no-rm
scope: {kind: installation}
rules:
  - id: deny-rm
    kinds: [exec]
    when: 'exec.cmd == "rm" || exec.cmd == "shred"'
    outcome: deny
`)
	if out := cli("policy", "edit", "no-rm", "-f", edited); strings.TrimSpace(out) != "no-rm version 2" {
		t.Errorf("edit printed %q", out)
	}
	if show := cli("policy", "show", "no-rm"); !strings.Contains(show, "# version 2") || !strings.Contains(show, "shred") {
		t.Errorf("policy show after edit:\n%s", show)
	}
	if show := cli("policy", "show", "no-rm", "--version", "1"); !strings.Contains(show, "# version 1") || strings.Contains(show, "shred") {
		t.Errorf("policy show --version 1:\n%s", show)
	}

	// The dry run reports the draft's denials of the recorded rm execs.
	test := cli("policy", "test", "-f", good, "--last", "200")
	if !strings.Contains(test, "deny 2") || !strings.Contains(test, "rule deny-rm: 2") || strings.Count(test, " exec ") < 2 {
		t.Errorf("policy test --last:\n%s", test)
	}
	if test := cli("policy", "test", "-f", good, "--since", "1h"); !strings.Contains(test, "deny 2") {
		t.Errorf("policy test --since:\n%s", test)
	}
	if _, errb, code := d.cli(t, "", "policy", "test", "-f", bad); code == 0 || !strings.Contains(errb, "line 2, column") {
		t.Errorf("policy test of a bad draft: exit %d, %q", code, errb)
	}

	cli("policy", "rm", "no-rm")
	if ls := cli("policy", "ls"); strings.Contains(ls, "no-rm") {
		t.Errorf("policy ls after rm:\n%s", ls)
	}
	if _, errb, code := d.cli(t, "", "policy", "show", "no-rm"); code == 0 || !strings.Contains(errb, "not found") {
		t.Errorf("show after rm: exit %d, %q", code, errb)
	}

	if ls := cli("approvals", "ls", "--state", "pending"); strings.TrimSpace(ls) != "ID  STATE  KIND  REQUESTER  TARGET  RULE  AGE  MESSAGE" {
		t.Errorf("approvals ls on none:\n%q", ls)
	}
	if _, errb, code := d.cli(t, "", "approvals", "approve", "apr_nosuch"); code == 0 || !strings.Contains(errb, "not found") {
		t.Errorf("approve unknown: exit %d, %q", code, errb)
	}
}
