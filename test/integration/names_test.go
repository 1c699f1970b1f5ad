package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSandboxNames drives sandbox names (issue 16: "optional sandbox names usable
// wherever an id is") through the real CLI and daemon: create with --name, use the
// name for exec, cp, fs, inspect and kill; a second live sandbox of one owner with the
// name is refused (409), the name is free again once its sandbox has ended, another
// owner may use it and never reaches yours by it, an admin told apart by id, and
// malformed names are refused naming the flag. The daemon keeps a warm pool, so a
// named create also goes through the pool's claim.
func TestSandboxNames(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--pool-size", "1")
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)

	agent := func(name string) (pid, key string) {
		t.Helper()
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name,
			Scopes: []string{"sandboxes:create", "sandboxes:exec", "files:read", "files:write"}})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID, k.Key
	}
	pidA, keyA := agent("names-a")
	pidB, keyB := agent("names-b")
	_, keyC := agent("names-c")

	// as runs the CLI with key and fails the test unless it exits 0.
	as := func(t *testing.T, key string, args ...string) string {
		t.Helper()
		out, errb, code := d.cliKey(t, key, "", args...)
		if code != 0 {
			t.Fatalf("warden %s: exit %d: %s", strings.Join(args, " "), code, errb)
		}
		return out
	}
	// refused runs the CLI with key and returns its stderr, failing the test unless it
	// exits non-zero.
	refused := func(t *testing.T, key string, args ...string) string {
		t.Helper()
		out, errb, code := d.cliKey(t, key, "", args...)
		if code == 0 {
			t.Fatalf("warden %s: exit 0 (%q), want a refusal", strings.Join(args, " "), out)
		}
		return errb
	}
	hostname := func(t *testing.T, key, ref string) string {
		t.Helper()
		return strings.TrimSpace(as(t, key, "exec", ref, "--", "cat", "/proc/sys/kernel/hostname"))
	}

	// Let the warm pool fill, so the first named create claims a pooled sandbox.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if dirs, _ := poolDirs(run); len(dirs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("the warm pool did not fill in 60 s; the named creates below boot instead")
			break
		}
	}

	idA := strings.TrimSpace(as(t, keyA, "sandbox", "create", "--name", "web"))
	if !strings.HasPrefix(idA, "sb-") {
		t.Fatalf("create --name web printed %q, want the sandbox id", idA)
	}

	t.Run("the name works where the id does", func(t *testing.T) {
		if got := hostname(t, keyA, "web"); got != idA {
			t.Errorf("exec web reached %q, want %s", got, idA)
		}
		out := as(t, keyA, "sandbox", "inspect", "web")
		if !strings.Contains(out, idA) || !strings.Contains(out, "Name:") || !strings.Contains(out, "web") {
			t.Errorf("inspect web:\n%s", out)
		}
		var sb warden.Sandbox
		if err := json.Unmarshal([]byte(as(t, keyA, "sandbox", "inspect", "--json", "web")), &sb); err != nil || sb.ID != idA || sb.Name != "web" {
			t.Errorf("inspect --json web: %+v %v", sb, err)
		}
		out = as(t, keyA, "sandbox", "ls")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 || !strings.Contains(lines[0], "NAME") {
			t.Fatalf("sandbox ls:\n%s", out)
		}
		found := false
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 1 && f[0] == idA && f[1] == "web" {
				found = true
			}
		}
		if !found {
			t.Errorf("sandbox ls has no row %s web:\n%s", idA, out)
		}
		if _, errb, code := d.cliKey(t, keyA, "named file\n", "cp", "-", "web:/tmp/n.txt"); code != 0 {
			t.Fatalf("cp - web:/tmp/n.txt: %d %s", code, errb)
		}
		if out := as(t, keyA, "fs", "cat", idA, "/tmp/n.txt"); out != "named file\n" {
			t.Errorf("the file copied to web is not in %s: %q", idA, out)
		}
		if out := as(t, keyA, "fs", "cat", "web", "/tmp/n.txt"); out != "named file\n" {
			t.Errorf("fs cat web: %q", out)
		}
		var sb2 warden.Sandbox
		if err := json.Unmarshal([]byte(as(t, keyA, "sandbox", "timeout", "--json", "web", "10m")), &sb2); err != nil || sb2.ID != idA {
			t.Errorf("sandbox timeout --json web 10m: %+v %v", sb2, err)
		}
	})

	t.Run("a second live sandbox with the name is a conflict", func(t *testing.T) {
		errb := refused(t, keyA, "sandbox", "create", "--name", "web")
		if !strings.Contains(errb, "conflict") || !strings.Contains(errb, idA) || !strings.Contains(errb, "--name") {
			t.Errorf("second create --name web: %q", errb)
		}
		// Nothing was left behind: A still has one live sandbox named web.
		n := 0
		for sb, err := range admin.AllSandboxes(ctx, warden.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if sb.Owner == pidA && sb.Name == "web" && !sb.State.Terminal() {
				n++
			}
		}
		if n != 1 {
			t.Errorf("A has %d live sandboxes named web, want 1", n)
		}
	})

	var idB string
	t.Run("another owner may use the name and reaches only its own", func(t *testing.T) {
		// C has no sandbox named web: A's stays invisible, exactly like a missing one.
		for _, args := range [][]string{{"sandbox", "inspect", "web"}, {"exec", "web", "--", "true"}, {"sandbox", "kill", "web"}} {
			if errb := refused(t, keyC, args...); !strings.Contains(errb, "not found") || strings.Contains(errb, idA) {
				t.Errorf("C: warden %s: %q", strings.Join(args, " "), errb)
			}
		}
		idB = strings.TrimSpace(as(t, keyB, "sandbox", "create", "--name", "web"))
		if idB == idA || !strings.HasPrefix(idB, "sb-") {
			t.Fatalf("B's create --name web printed %q (A's is %s)", idB, idA)
		}
		if got := hostname(t, keyB, "web"); got != idB {
			t.Errorf("B's exec web reached %q, want B's %s", got, idB)
		}
		if got := hostname(t, keyA, "web"); got != idA {
			t.Errorf("A's exec web reached %q, want A's %s", got, idA)
		}
		// B cannot reach A's by id either.
		if errb := refused(t, keyB, "sandbox", "inspect", idA); !strings.Contains(errb, "not found") {
			t.Errorf("B inspects A's id: %q", errb)
		}
	})

	t.Run("an admin is told apart by id, and its own name comes first", func(t *testing.T) {
		errb := refused(t, d.adminKey, "sandbox", "inspect", "web")
		if !strings.Contains(errb, "conflict") || !strings.Contains(errb, idA) || !strings.Contains(errb, idB) {
			t.Errorf("admin inspect web with A's and B's live: %q", errb)
		}
		own := strings.TrimSpace(as(t, d.adminKey, "sandbox", "create", "--name", "web"))
		out := as(t, d.adminKey, "sandbox", "inspect", "web")
		if !strings.Contains(out, own) {
			t.Errorf("admin inspect web after creating its own %s:\n%s", own, out)
		}
		as(t, d.adminKey, "sandbox", "kill", own)
		// With B's ended, the name resolves to A's alone.
		as(t, keyB, "sandbox", "kill", "web")
		out = as(t, d.adminKey, "sandbox", "inspect", "web")
		if !strings.Contains(out, idA) {
			t.Errorf("admin inspect web with only A's live:\n%s", out)
		}
		if sb, err := admin.GetSandbox(ctx, idB); err != nil || sb.State == warden.StateRunning || sb.Owner != pidB {
			t.Errorf("B's sandbox after B killed web: %s %v", sb.State, err)
		}
	})

	t.Run("the name is free again once its sandbox has ended", func(t *testing.T) {
		as(t, keyA, "sandbox", "kill", "web")
		sb, err := admin.GetSandbox(ctx, idA)
		if err != nil || !sb.State.Terminal() || sb.Name != "web" {
			t.Fatalf("A's sandbox after kill web: %s name %q %v", sb.State, sb.Name, err)
		}
		// An ended sandbox is reached by id, not by name.
		if errb := refused(t, keyA, "sandbox", "inspect", "web"); !strings.Contains(errb, "not found") {
			t.Errorf("inspect web after it ended: %q", errb)
		}
		if out := as(t, keyA, "sandbox", "inspect", idA); !strings.Contains(out, "web") {
			t.Errorf("inspect %s after it ended:\n%s", idA, out)
		}
		again := strings.TrimSpace(as(t, keyA, "sandbox", "create", "--name", "web"))
		if again == idA || !strings.HasPrefix(again, "sb-") {
			t.Fatalf("create --name web after the kill printed %q", again)
		}
		if got := hostname(t, keyA, "web"); got != again {
			t.Errorf("exec web reached %q, want the new %s", got, again)
		}
		as(t, keyA, "sandbox", "kill", "web")
	})

	t.Run("a session by name whose sandbox dies says which sandbox ended", func(t *testing.T) {
		sid := strings.TrimSpace(as(t, d.adminKey, "sandbox", "create", "--name", "session"))
		type res struct {
			errb string
			code int
		}
		done := make(chan res, 1)
		go func() {
			_, errb, code := d.cliOpenStdin(t, "exec", "-it", "session", "--", "sleep", "300")
			done <- res{errb, code}
		}()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ps, err := admin.Processes(ctx, sid)
			if err == nil && slices.ContainsFunc(ps, func(p warden.ProcessInfo) bool { return slices.Contains(p.Cmd, "sleep") && !p.Exited }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the session did not start")
			}
		}
		if err := admin.KillSandbox(ctx, sid); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.code == 0 || !strings.Contains(r.errb, "sandbox "+sid+" ended") {
				t.Errorf("code %d stderr %q", r.code, r.errb)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the session did not end with its sandbox")
		}
	})

	t.Run("malformed names are refused naming the flag", func(t *testing.T) {
		for _, bad := range []string{"Web", "sb-mine", "has_underscore", "trailing-", strings.Repeat("a", 64)} {
			errb := refused(t, keyA, "sandbox", "create", "--name", bad)
			if !strings.Contains(errb, "--name") || !strings.Contains(errb, "not a valid sandbox name") || strings.Contains(errb, "validation_failed: name:") {
				t.Errorf("create --name %q: %q", bad, errb)
			}
		}
		errb := refused(t, keyA, "sandbox", "fork", "-n", "2", "--name", "two", idA)
		if !strings.Contains(errb, "--name") {
			t.Errorf("fork -n 2 --name two: %q", errb)
		}
		// None of them made a sandbox.
		for sb, err := range admin.AllSandboxes(ctx, warden.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if sb.Owner == pidA && !sb.State.Terminal() {
				t.Errorf("A has a live sandbox %s (%q) after refused creates", sb.ID, sb.Name)
			}
		}
	})
}
