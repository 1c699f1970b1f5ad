package integration

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
	_ "modernc.org/sqlite"
)

// hostLeftovers lists what the host still holds for sandbox id.
func hostLeftovers(runDir, id string) []string {
	var left []string
	if _, err := os.Stat(filepath.Join(runDir, "native", id)); err == nil {
		left = append(left, "run dir")
	}
	m, _ := filepath.Glob("/sys/fs/cgroup/*/warden/sb-" + id)
	left = append(left, m...)
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/sb-"+id+"\n") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p)))
		}
	}
	return left
}

func agentPid(t *testing.T, runDir, id string) int {
	raw, err := os.ReadFile(filepath.Join(runDir, "native", id, "handle.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Data struct {
			Pid int `json:"pid"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &h); err != nil || h.Data.Pid == 0 {
		t.Fatalf("handle %s: %v", raw, err)
	}
	return h.Data.Pid
}

// TestRestart kills the daemon with SIGKILL while sandboxes run; after a
// restart every sandbox is either re-attached and usable or cleaned up and
// reported lost, with nothing left on the host.
func TestRestart(t *testing.T) {
	state, run := newDirs(t)
	d1 := startDaemon(t, state, run)
	c := d1.client(t, d1.adminKey)
	ctx := ctxT(t)
	keep, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, keep.ID, "/home/user/state.txt", strings.NewReader("survives"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bg, err := c.StartProcess(ctx, keep.ID, warden.ExecRequest{Command: "sleep 600", Tag: "long"})
	if err != nil {
		t.Fatal(err)
	}
	bg.Close()
	d1.stop(syscall.SIGKILL)
	// While the daemon is down, one sandbox dies.
	syscall.Kill(agentPid(t, run, gone.ID), syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)

	// And a crash left a half-created sandbox that no record owns.
	orphan := "sb-orphan" + fmt.Sprint(time.Now().UnixNano()%100000)
	os.MkdirAll(filepath.Join(run, "native", orphan, "stage"), 0o700)
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/warden")
	for _, cg := range cgs {
		os.Mkdir(filepath.Join(cg, "sb-"+orphan), 0o755)
	}

	d2 := startDaemon(t, state, run)
	c = d2.client(t, d2.adminKey)
	if left := hostLeftovers(run, orphan); len(left) > 0 {
		t.Fatalf("orphan left after restart: %v", left)
	}
	got, err := c.GetSandbox(ctx, keep.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("kept sandbox after restart: %+v %v\n%s", got, err, d2.log)
	}
	r, err := c.ReadFile(ctx, keep.ID, "/home/user/state.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatalf("read after restart: %v", err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "survives" {
		t.Fatalf("file after restart: %q", b)
	}
	procs, err := c.Processes(ctx, keep.ID)
	if err != nil || len(procs) == 0 {
		t.Fatalf("background process after restart: %+v %v", procs, err)
	}
	res, err := c.Exec(ctx, keep.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after restart: %v %+v", err, res)
	}
	lost, err := c.GetSandbox(ctx, gone.ID)
	if err != nil || lost.State != "lost" || lost.EndReason == "" {
		t.Fatalf("dead sandbox after restart: %+v %v", lost, err)
	}
	if left := hostLeftovers(run, gone.ID); len(left) > 0 {
		t.Fatalf("lost sandbox left %v", left)
	}
	if err := c.KillSandbox(ctx, keep.ID); err != nil {
		t.Fatal(err)
	}
	if left := hostLeftovers(run, keep.ID); len(left) > 0 {
		t.Fatalf("killed sandbox left %v", left)
	}
	// A graceful stop keeps sandboxes too, running or paused: a paused one
	// is listed paused after the restart and resumes with its process and
	// memory (a counter counts on from where it stood).
	s3, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	paused, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	counter, err := c.StartProcess(ctx, paused.ID, warden.ExecRequest{Cmd: []string{"python3", "-c",
		"import itertools, os, time\nfor i in itertools.count():\n    open('/tmp/c.tmp', 'w').write('%d %d' % (os.getpid(), i)); os.replace('/tmp/c.tmp', '/tmp/c'); time.sleep(0.02)\n"}})
	if err != nil {
		t.Fatal(err)
	}
	counter.Close()
	time.Sleep(300 * time.Millisecond)
	if _, err := c.PauseSandbox(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	d2.stop(syscall.SIGTERM)
	d3 := startDaemon(t, state, run)
	c = d3.client(t, d3.adminKey)
	if got, err := c.GetSandbox(ctx, s3.ID); err != nil || got.State != "running" {
		t.Fatalf("after graceful restart: %+v %v", got, err)
	}
	if got, err := c.GetSandbox(ctx, paused.ID); err != nil || got.State != "paused" {
		t.Fatalf("paused sandbox after restart: %+v %v\n%s", got, err, d3.log)
	}
	if _, err := c.ResumeSandbox(ctx, paused.ID); err != nil {
		t.Fatalf("resume after restart: %v", err)
	}
	readCounter := func() (pid, n int) {
		var out bytes.Buffer
		if _, err := c.Exec(ctx, paused.ID, warden.ExecRequest{Cmd: []string{"cat", "/tmp/c"}}, warden.ExecIO{Stdout: &out}); err != nil {
			t.Fatalf("read counter: %v", err)
		}
		fmt.Sscan(out.String(), &pid, &n)
		return
	}
	pid1, n1 := readCounter()
	time.Sleep(200 * time.Millisecond)
	pid2, n2 := readCounter()
	if n1 == 0 || pid1 != pid2 || n2 <= n1 {
		t.Fatalf("counter across pause, restart and resume: pid %d -> %d, count %d -> %d", pid1, pid2, n1, n2)
	}
	c.KillSandbox(ctx, s3.ID)
	c.KillSandbox(ctx, paused.ID)
}

// TestAuditTamper edits, deletes and reorders audit rows in the database
// while the daemon is stopped; `warden audit verify` reports each.
func TestAuditTamper(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	for i := 0; i < 3; i++ {
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
		c.KillSandbox(ctx, sb.ID)
	}
	if out, errb, code := d.cli(t, "", "audit", "verify"); code != 0 {
		t.Fatalf("verify before tampering: %d %s %s", code, out, errb)
	}
	d.stop(syscall.SIGTERM)
	backup := t.TempDir()
	files := []string{"warden.db", "warden.db-wal", "warden.db-shm", "audit.checkpoint"}
	copyFiles(t, state, backup, files)

	cases := []struct {
		name, kind string
		sql        []string
	}{
		{"edit", "modified", []string{"UPDATE audit_events SET target = 'forged' WHERE seq = 3"}},
		{"delete", "missing", []string{"DELETE FROM audit_events WHERE seq = 4"}},
		{"reorder", "reordered", []string{
			"UPDATE audit_events SET seq = -1 WHERE seq = 2",
			"UPDATE audit_events SET seq = 2 WHERE seq = 5",
			"UPDATE audit_events SET seq = 5 WHERE seq = -1"}},
		{"truncate", "missing", []string{"DELETE FROM audit_events WHERE seq > 6"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			copyFiles(t, backup, state, files)
			db, err := sql.Open("sqlite", filepath.Join(state, "warden.db"))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range tc.sql {
				if res, err := db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				} else if n, _ := res.RowsAffected(); n == 0 {
					t.Fatalf("%s changed nothing", q)
				}
			}
			db.Close()
			d := startDaemon(t, state, run)
			out, errb, code := d.cli(t, "", "audit", "verify")
			d.stop(syscall.SIGTERM)
			if code == 0 {
				t.Fatalf("verify passed after %s:\n%s", tc.name, out)
			}
			if !strings.Contains(out+errb, tc.kind) {
				t.Fatalf("verify after %s does not report %q:\n%s%s", tc.name, tc.kind, out, errb)
			}
		})
	}
}

func copyFiles(t *testing.T, from, to string, names []string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(from, n))
		if os.IsNotExist(err) {
			os.Remove(filepath.Join(to, n))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, n), b, 0o600); err != nil {
			t.Fatal(fmt.Errorf("copy %s: %w", n, err))
		}
	}
}
