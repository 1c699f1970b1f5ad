package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// allCommands returns every command of the tree, root first.
func allCommands() []*command {
	root := newRoot()
	root.build(&globalFlags{})
	var out []*command
	var walk func(c *command)
	walk = func(c *command) {
		out = append(out, c)
		for _, s := range c.subs {
			walk(s)
		}
	}
	walk(root)
	return out
}

// TestHelpGolden pins the --help output of every command.
func TestHelpGolden(t *testing.T) {
	for _, c := range allCommands() {
		words := strings.Fields(c.path())[1:]
		name := "help/" + strings.Join(append([]string{"warden"}, words...), "_") + ".golden"
		t.Run(strings.Join(append([]string{"warden"}, words...), "_"), func(t *testing.T) {
			res := run(t, nil, append(words, "--help")...)
			if res.code != 0 || res.stderr != "" {
				t.Fatalf("--help: code %d, stderr %q", res.code, res.stderr)
			}
			golden(t, name, res.stdout)

			// -h and 'warden help ...' print the same.
			if h := run(t, nil, append(words, "-h")...); h.stdout != res.stdout {
				t.Errorf("-h differs from --help")
			}
			if h := run(t, nil, append([]string{"help"}, words...)...); h.stdout != res.stdout || h.code != 0 {
				t.Errorf("warden help %s differs from --help (code %d)", strings.Join(words, " "), h.code)
			}
			for _, line := range strings.Split(res.stdout, "\n") {
				if len(line) > 100 {
					t.Errorf("help line longer than 100 characters: %q", line)
				}
			}
		})
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	for _, c := range allCommands() {
		if c.short == "" && c.parent != nil {
			t.Errorf("%s has no short description", c.path())
		}
		if c.long == "" {
			t.Errorf("%s has no long description", c.path())
		}
	}
}

var (
	t0       = time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	endedAt  = time.Date(2025, 1, 2, 15, 8, 0, 0, time.UTC)
	revokeAt = time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC)
)

func fixtureSandboxes() []warden.Sandbox {
	return []warden.Sandbox{
		{
			ID: "sb-01hzx3k9q2", Name: "web", Template: "base", State: warden.StateRunning, Owner: "pr-01hzx3k9q2",
			Backend: "native", CPUMillis: 1000, MemoryMB: 512, DiskMB: 1024,
			Metadata: map[string]string{"job": "42", "team": "infra"}, EnvKeys: []string{"K"},
			User: "user", Workdir: "/home/user",
			CreatedAt: t0, StartedAt: t0.Add(time.Second), ExpiresAt: t0.Add(10*time.Minute + time.Second),
		},
		{
			ID: "sb-01hzx3aaaa", Template: "python", State: warden.StateStopped, Owner: "pr-01hzx3k9q2",
			Backend: "native", CPUMillis: 500, MemoryMB: 256, DiskMB: 512,
			Metadata:  map[string]string{"note": strings.Repeat("long-value-", 6)},
			CreatedAt: t0.Add(-26 * time.Hour), StartedAt: t0.Add(-26 * time.Hour), ExpiresAt: t0,
			EndedAt: &endedAt, EndReason: "killed",
		},
		{
			ID: "sb-01hzx3bbbb", State: warden.StateStarting,
			CreatedAt: testNow.Add(-20 * time.Second), ExpiresAt: testNow.Add(3 * time.Hour),
		},
	}
}

// TestOutputGolden pins the text output of the commands that print objects.
func TestOutputGolden(t *testing.T) {
	d := newFakeDaemon(t)
	sbs := fixtureSandboxes()
	d.json("GET /v1/sandboxes", 200, warden.SandboxPage{Sandboxes: sbs, NextPageToken: "p2"})
	d.json("GET /v1/sandboxes/sb-01hzx3k9q2", 200, sbs[0])
	d.json("GET /v1/sandboxes/sb-01hzx3aaaa", 200, sbs[1])
	d.json("GET /v1/sandboxes/sb-01hzx3k9q2/usage", 200, warden.Usage{
		CPUNanos: 1_234_567_890, MemoryBytes: 12 << 20, MemoryPeak: 20<<20 + 512<<10, PIDs: 3, DiskBytes: 3 << 29, OOMEvents: 0,
	})
	d.json("GET /v1/sandboxes/sb-01hzx3k9q2/processes", 200, map[string]any{"processes": []warden.ProcessInfo{
		{PID: 12, Tag: "web", Cmd: []string{"python3", "-m", "http.server"}, User: "user"},
		{PID: 40, Cmd: []string{"sh", "-c", "echo done"}, User: "root", Exited: true},
	}})
	entries := []warden.Entry{
		{Name: "a.txt", Path: "/home/user/a.txt", Type: "file", Size: 5, Mode: "0644", Owner: "user", Group: "user", ModifiedAt: t0},
		{Name: "bin", Path: "/home/user/bin", Type: "dir", Size: 4096, Mode: "0755", Owner: "user", Group: "user", ModifiedAt: t0},
		{Name: "run", Path: "/home/user/bin/run", Type: "file", Size: 120, Mode: "4755", Owner: "root", Group: "root", ModifiedAt: t0},
		{Name: "py", Path: "/home/user/py", Type: "symlink", Size: 16, Mode: "0777", Owner: "user", Group: "user", ModifiedAt: t0, SymlinkTarget: "/usr/bin/python3"},
		{Name: "tmp", Path: "/home/user/tmp", Type: "dir", Size: 4096, Mode: "1777", Owner: "root", Group: "root", ModifiedAt: t0},
	}
	d.json("GET /v1/sandboxes/sb-01hzx3k9q2/fs/list", 200, map[string]any{"entries": entries})
	d.json("GET /v1/sandboxes/sb-01hzx3k9q2/fs/stat", 200, entries[3])
	keys := []warden.APIKey{
		{ID: "a1b2c3d4", Prefix: "wdn_a1b2c3d4", PrincipalID: "pr-01hzx3k9q2", Name: "ci", Scopes: []string{"sandboxes:create", "sandboxes:exec"}, CreatedAt: t0},
		{ID: "e5f6a7b8", Prefix: "wdn_e5f6a7b8", PrincipalID: "pr-01hzx3a000", Scopes: []string{"admin"}, CreatedAt: t0.Add(-72 * time.Hour), RevokedAt: &revokeAt},
	}
	d.json("GET /v1/keys", 200, map[string]any{"keys": keys})
	principals := []warden.Principal{
		{ID: "pr-01hzx3a000", Kind: "user", Name: "admin", CreatedAt: t0.Add(-72 * time.Hour)},
		{ID: "pr-01hzx3k9q2", Kind: "agent", Name: "ci-bot", CreatedBy: "pr-01hzx3a000", CreatedAt: t0},
	}
	d.json("GET /v1/principals", 200, map[string]any{"principals": principals})
	d.json("GET /v1/whoami", 200, warden.Identity{Principal: principals[1], Key: keys[0]})
	d.json("GET /v1/audit", 200, warden.AuditPage{Events: []warden.AuditEvent{
		{Seq: 1, Time: t0, PrincipalID: "pr-01hzx3a000", Action: "principal.create", Target: "pr-01hzx3k9q2", Outcome: "success"},
		{Seq: 2, Time: t0.Add(time.Second), PrincipalID: "pr-01hzx3k9q2", Action: "sandbox.create", Target: "sb-01hzx3k9q2", Outcome: "success"},
		{Seq: 3, Time: t0.Add(2 * time.Second), PrincipalID: "pr-01hzx3k9q2", Action: "key.create", Outcome: "denied"},
	}, NextAfter: 3})
	d.json("GET /v1/audit/verify", 200, warden.VerifyReport{OK: false, Checked: 3, Problems: []warden.VerifyProblem{
		{Seq: 2, Kind: warden.ProblemModified, Message: "hash does not match the event"},
		{Seq: 3, Kind: warden.ProblemBrokenChain, Message: "prev_hash does not match\nevent 2"},
	}})

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"sandbox_ls", []string{"sandbox", "ls", "--limit", "3"}, 0},
		{"sandbox_ls_quiet", []string{"sandbox", "ls", "-q", "--limit", "3"}, 0},
		{"sandbox_inspect_running", []string{"sandbox", "inspect", "sb-01hzx3k9q2"}, 0},
		{"sandbox_inspect_stopped", []string{"sandbox", "inspect", "sb-01hzx3aaaa"}, 0},
		{"sandbox_usage", []string{"sandbox", "usage", "sb-01hzx3k9q2"}, 0},
		{"process_ls", []string{"process", "ls", "sb-01hzx3k9q2"}, 0},
		{"fs_ls", []string{"fs", "ls", "sb-01hzx3k9q2", "/home/user", "--depth", "2"}, 0},
		{"fs_stat", []string{"fs", "stat", "sb-01hzx3k9q2", "/home/user/py"}, 0},
		{"keys_ls", []string{"keys", "ls"}, 0},
		{"principals_ls", []string{"principals", "ls"}, 0},
		{"whoami", []string{"whoami"}, 0},
		{"audit_ls", []string{"audit", "ls"}, 0},
		{"audit_verify_problems", []string{"audit", "verify"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, d, tc.args...)
			if res.code != tc.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", res.code, tc.code, res.stderr)
			}
			out := normalize(strings.ReplaceAll(res.stdout, d.srv.URL, "[url]"))
			if res.stderr != "" {
				out += "--- stderr\n" + res.stderr
			}
			golden(t, "output/"+tc.name+".golden", out)
		})
	}
}

// TestJSONOutput checks that --json prints the SDK's objects, and [] for empty lists.
func TestJSONOutput(t *testing.T) {
	d := newFakeDaemon(t)
	sbs := fixtureSandboxes()
	d.json("GET /v1/sandboxes", 200, warden.SandboxPage{Sandboxes: sbs})
	d.json("GET /v1/keys", 200, map[string]any{"keys": nil})
	d.json("POST /v1/sandboxes", 201, sbs[0])

	res := run(t, d, "sandbox", "ls", "--json")
	var got []warden.Sandbox
	mustJSON(t, res.stdout, &got)
	if len(got) != 3 || got[0].ID != "sb-01hzx3k9q2" || !got[1].EndedAt.Equal(endedAt) {
		t.Errorf("sandbox ls --json: %+v", got)
	}

	res = run(t, d, "keys", "ls", "--json")
	if strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("keys ls --json with no keys: %q, want []", res.stdout)
	}

	// --json is a flag of the command that prints.
	res = run(t, d, "sandbox", "create", "--json")
	var sb warden.Sandbox
	mustJSON(t, res.stdout, &sb)
	if sb.ID != "sb-01hzx3k9q2" {
		t.Errorf("create --json: %+v", sb)
	}
}

func TestSandboxLsAllPages(t *testing.T) {
	d := newFakeDaemon(t)
	sbs := fixtureSandboxes()
	d.handle("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page_token") == "" {
			writeJSON(w, 200, warden.SandboxPage{Sandboxes: sbs[:2], NextPageToken: "p2"})
			return
		}
		writeJSON(w, 200, warden.SandboxPage{Sandboxes: sbs[2:]})
	})
	res := run(t, d, "sandbox", "ls", "-q", "--state", "running", "--meta", "job=42", "--meta", "team=infra")
	if res.code != 0 {
		t.Fatalf("code %d: %s", res.code, res.stderr)
	}
	if want := "sb-01hzx3k9q2\nsb-01hzx3aaaa\nsb-01hzx3bbbb\n"; res.stdout != want {
		t.Errorf("stdout %q, want %q", res.stdout, want)
	}
	reqs := d.requests()
	if len(reqs) != 2 || reqs[0] != "GET /v1/sandboxes?metadata=job%3A42%2Cteam%3Ainfra&state=running" {
		t.Errorf("requests: %q", reqs)
	}
}
