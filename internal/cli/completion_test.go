package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestCompletionBash sources the generated bash script and asks it for completions, with
// a stand-in warden on PATH that answers 'sandbox ls -q'.
func TestCompletionBash(t *testing.T) {
	res := run(t, nil, "completion", "bash")
	if res.code != 0 {
		t.Fatalf("completion bash: %d %s", res.code, res.stderr)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "warden.bash")
	if err := os.WriteFile(script, []byte(res.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\n[ \"$*\" = \"sandbox ls -q\" ] && printf 'sb-one\\nsb-two\\n'\n"
	if err := os.WriteFile(filepath.Join(dir, "warden"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string // the last is the word being completed
		want  string   // COMPREPLY, space-separated, sorted by bash
	}{
		{[]string{"warden", "sa"}, "sandbox"},
		{[]string{"warden", "sandbox", "k"}, "kill"},
		{[]string{"warden", "sandbox", "ls", "--qu"}, "--quiet"},
		{[]string{"warden", "sandbox", "list", "--qu"}, "--quiet"}, // an alias
		{[]string{"warden", "sandbox", "create", "--temp"}, "--template"},
		{[]string{"warden", "exec", ""}, "sb-one sb-two"},
		{[]string{"warden", "exec", "--cwd", "/x", "sb-"}, "sb-one sb-two"}, // --cwd takes a value
		{[]string{"warden", "sandbox", "kill", "sb-one", "sb-t"}, "sb-two"}, // ID...
		{[]string{"warden", "sandbox", "inspect", "sb-one", "sb-"}, ""},     // one ID only
		{[]string{"warden", "keys", "revoke", "sb-"}, ""},                   // a key ID, not a sandbox
		{[]string{"warden", "completion", "--h"}, ""},
		{[]string{"warden", "comp"}, "completion"},
	} {
		var words strings.Builder
		for _, w := range tc.words {
			words.WriteString(" " + shellQuote(w))
		}
		prog := "source " + script + "\nCOMP_WORDS=(" + words.String() + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(tc.words)-1) + "\ncd " + t.TempDir() + "\n_warden\necho \"${COMPREPLY[*]}\"\n"
		cmd := exec.Command("bash", "--norc", "-c", prog)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: bash: %v %s", tc.words, err, errb.String())
		}
		if got := strings.TrimSpace(out.String()); got != tc.want {
			t.Errorf("%v: got %q, want %q (stderr %q)", tc.words, got, tc.want, errb.String())
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestCompletionScripts: every shell gets a script naming commands from the command table;
// an unknown shell is a usage error.
func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		res := run(t, nil, "completion", sh)
		if res.code != 0 || !strings.Contains(res.stdout, "sandbox ls -q") || !strings.Contains(res.stdout, "warden template import") {
			t.Errorf("%s: code %d, stderr %q, script:\n%.300s", sh, res.code, res.stderr, res.stdout)
		}
	}
	if res := run(t, nil, "completion", "tcsh"); res.code != ExitUsage {
		t.Errorf("tcsh: code %d, stderr %q", res.code, res.stderr)
	}
	if res := run(t, nil, "completion"); res.code != ExitUsage {
		t.Errorf("no shell: code %d", res.code)
	}
}

// TestAuditTableNames: principals by name (with the ID) when known, times to the second.
func TestAuditTableNames(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.Local)
	var b bytes.Buffer
	err := writeAuditTable(&b, []warden.AuditEvent{
		{Seq: 1, Time: at, PrincipalID: "pr-abc", Action: "sandbox.create", Target: "sb-1", Outcome: "success"},
		{Seq: 2, Time: at, PrincipalID: "pr-zzz", Action: "sandbox.kill", Outcome: "denied"},
	}, map[string]string{"pr-abc": "alice"})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"alice (pr-abc)", "2025-03-04 05:06:07", "pr-zzz"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
