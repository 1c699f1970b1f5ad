package integration

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestDaemon drives one real wardend through the SDK and the CLI.
func TestDaemon(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, "--pool-size", "2") // as users run it
	admin := d.client(t, d.adminKey)
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, d, admin) })
	t.Run("Exec", func(t *testing.T) { testExec(t, d, admin) })
	t.Run("PTY", func(t *testing.T) { testPTY(t, d, admin) })
	t.Run("Files", func(t *testing.T) { testFiles(t, d, admin) })
	t.Run("TimeoutExpiry", func(t *testing.T) { testTimeout(t, d, admin) })
	t.Run("Authorization", func(t *testing.T) { testAuthz(t, d, admin) })
	t.Run("CLI", func(t *testing.T) { testCLI(t, d) })
	t.Run("PauseResume", func(t *testing.T) { testPause(t, d, admin) })
	t.Run("AutoPauseResume", func(t *testing.T) { testAutoPause(t, d, admin) })
}

func testPause(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	sb := create(t, c, warden.CreateSandboxRequest{})
	ticker, err := c.StartProcess(ctx, sb.ID, warden.ExecRequest{Command: "while :; do date +%s%N >> /tmp/ticks; sleep 0.05; done"})
	if err != nil {
		t.Fatal(err)
	}
	ticker.Close()
	time.Sleep(300 * time.Millisecond)
	p, err := c.PauseSandbox(ctx, sb.ID)
	if err != nil || p.State != "paused" {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsConflict(err) {
		t.Fatalf("exec while paused: %v, want 409", err)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); !warden.IsConflict(err) {
		t.Fatalf("second pause: %v, want 409", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if r, err := c.ResumeSandbox(ctx, sb.ID); err != nil || r.State != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	time.Sleep(300 * time.Millisecond)
	var out bytes.Buffer
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"cat", "/tmp/ticks"}}, warden.ExecIO{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	// The ticker wrote every 50 ms except while frozen: the biggest gap
	// between two ticks is the pause.
	var prev, gap int64
	for _, l := range strings.Fields(out.String()) {
		var v int64
		fmt.Sscan(l, &v)
		if prev != 0 && v-prev > gap {
			gap = v - prev
		}
		prev = v
	}
	if gap < int64(1200*time.Millisecond) {
		t.Fatalf("largest gap between ticks %v: the sandbox was not frozen", time.Duration(gap))
	}
	// A paused sandbox can be killed.
	sb2 := create(t, c, warden.CreateSandboxRequest{})
	if _, err := c.PauseSandbox(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.KillSandbox(ctx, sb2.ID); err != nil {
		t.Fatalf("kill paused: %v", err)
	}
	if got, _ := c.GetSandbox(ctx, sb2.ID); got.State != "stopped" {
		t.Fatalf("killed paused sandbox is %s", got.State)
	}
}

// testAutoPause: a sandbox created with auto_pause is paused, not killed, at
// its timeout, and with auto_resume the next call resumes it: a Python
// counter keeps its memory and counts on from where it stopped, under the
// same process.
func testAutoPause(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	started := time.Now()
	sb := create(t, c, warden.CreateSandboxRequest{TimeoutSeconds: 2, AutoPause: true, AutoResume: true})
	if !sb.AutoPause || !sb.AutoResume {
		t.Fatalf("lifecycle not reported: %+v", sb)
	}
	counter := "import itertools, os, time\nfor i in itertools.count():\n    open('/tmp/c.tmp', 'w').write('%d %d' % (os.getpid(), i)); os.replace('/tmp/c.tmp', '/tmp/c'); time.sleep(0.02)\n"
	p, err := c.StartProcess(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", counter}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	read := func() (pid, n int) {
		t.Helper()
		var out bytes.Buffer
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"cat", "/tmp/c"}}, warden.ExecIO{Stdout: &out}); err != nil {
			t.Fatalf("read counter: %v", err)
		}
		fmt.Sscan(out.String(), &pid, &n)
		return pid, n
	}
	deadline := time.Now().Add(10 * time.Second)
	var got warden.Sandbox
	for {
		if got, err = c.GetSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if got.State == "paused" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got.State != "paused" {
		t.Fatalf("at its timeout the sandbox is %s (%s), want paused", got.State, got.EndReason)
	}
	time.Sleep(1500 * time.Millisecond) // frozen: the counter must not advance
	pid1, n1 := read()                  // this call resumes it
	if got, _ := c.GetSandbox(ctx, sb.ID); got.State != "running" || !got.ExpiresAt.After(time.Now()) {
		t.Fatalf("after a call: %s, expires %v; want running with a fresh timeout", got.State, got.ExpiresAt)
	}
	// A tick takes at least 20 ms, so the counter can have advanced only
	// while not frozen: at most (time since start - 1.5 s frozen) / 20 ms.
	if limit := int((time.Since(started)-1500*time.Millisecond)/(20*time.Millisecond)) + 5; n1 > limit || n1 < 10 {
		t.Errorf("counter at %d (at most %d unless it ran while paused)", n1, limit)
	}
	time.Sleep(300 * time.Millisecond)
	pid2, n2 := read()
	if pid2 != pid1 || n2 <= n1 {
		t.Errorf("after resume: pid %d -> %d, count %d -> %d; want the same process counting on", pid1, pid2, n1, n2)
	}
	// A plain pause without auto_resume still answers 409 to calls.
	plain := create(t, c, warden.CreateSandboxRequest{})
	if _, err := c.PauseSandbox(ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, plain.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsConflict(err) {
		t.Errorf("exec in a paused sandbox without auto_resume: %v, want 409", err)
	}
	c.KillSandbox(ctx, plain.ID)
	c.KillSandbox(ctx, sb.ID)
}

func create(t *testing.T, c *warden.Client, req warden.CreateSandboxRequest) warden.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(ctxT(t), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(ctxT(t), sb.ID) })
	return sb
}

func testLifecycle(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	run := fmt.Sprint(time.Now().UnixNano())
	var ids []string
	for i := 0; i < 5; i++ {
		sb := create(t, c, warden.CreateSandboxRequest{MemoryMB: 256, TimeoutSeconds: 600,
			Metadata: map[string]string{"run": run, "idx": fmt.Sprint(i % 2)}, Env: map[string]string{"SECRET": "hidden"}})
		if sb.State != warden.SandboxState("running") || sb.MemoryMB != 256 || sb.Template != "base" {
			t.Fatalf("created sandbox = %+v", sb)
		}
		if len(sb.EnvKeys) != 1 || sb.EnvKeys[0] != "SECRET" {
			t.Fatalf("env keys = %v", sb.EnvKeys)
		}
		ids = append(ids, sb.ID)
	}
	got, err := c.GetSandbox(ctx, ids[0])
	if err != nil || got.ID != ids[0] {
		t.Fatalf("get: %+v %v", got, err)
	}
	// Pagination: 5 matching sandboxes, 2 per page, each seen once.
	seen := map[string]int{}
	token, pages := "", 0
	for {
		page, err := c.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"run": run}, Limit: 2, PageToken: token})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		pages++
		for _, sb := range page.Sandboxes {
			seen[sb.ID]++
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	if len(seen) != 5 || pages != 3 {
		t.Fatalf("paged %d pages, saw %v", pages, seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("sandbox %s listed %d times", id, n)
		}
	}
	// Metadata and state filters.
	page, err := c.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"run": run, "idx": "1"}})
	if err != nil || len(page.Sandboxes) != 2 {
		t.Fatalf("metadata filter: %d, %v", len(page.Sandboxes), err)
	}
	// Timeout: extend.
	before := got.ExpiresAt
	sb, err := c.SetTimeout(ctx, ids[0], 3600)
	if err != nil || !sb.ExpiresAt.After(before) {
		t.Fatalf("set timeout: %v %v -> %v", err, before, sb.ExpiresAt)
	}
	// Kill: the state machine says stopped; a second kill is fine; exec is refused with 409.
	if err := c.KillSandbox(ctx, ids[1]); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if err := c.KillSandbox(ctx, ids[1]); err != nil {
		t.Fatalf("second kill: %v", err)
	}
	sb, _ = c.GetSandbox(ctx, ids[1])
	if sb.State != "stopped" || sb.EndedAt == nil {
		t.Fatalf("after kill: %+v", sb)
	}
	_, err = c.Exec(ctx, ids[1], warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
	if !warden.IsConflict(err) {
		t.Fatalf("exec in a stopped sandbox = %v, want 409", err)
	}
	page, err = c.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"run": run}, State: "stopped"})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != ids[1] {
		t.Fatalf("state filter: %+v %v", page.Sandboxes, err)
	}
	if _, err := c.GetSandbox(ctx, "sb-doesnotexist"); !warden.IsNotFound(err) {
		t.Fatalf("get missing = %v", err)
	}
	if _, err := c.Usage(ctx, ids[0]); err != nil {
		t.Fatalf("usage: %v", err)
	}
}

func testExec(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	sb := create(t, c, warden.CreateSandboxRequest{Env: map[string]string{"GREETING": "hi"}})
	var out, errb bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "echo $GREETING; echo oops >&2; exit 4"}, warden.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 4 || out.String() != "hi\n" || errb.String() != "oops\n" {
		t.Fatalf("exec: %v %+v %q %q", err, res, out.String(), errb.String())
	}
	out.Reset()
	res, err = c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"sort"}}, warden.ExecIO{Stdin: strings.NewReader("b\na\n"), Stdout: &out})
	if err != nil || out.String() != "a\nb\n" {
		t.Fatalf("stdin: %v %q", err, out.String())
	}
	out.Reset()
	res, err = c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"sh", "-c", "id -un; pwd"}, User: "root", Cwd: "/tmp"}, warden.ExecIO{Stdout: &out})
	if err != nil || out.String() != "root\n/tmp\n" {
		t.Fatalf("user/cwd: %v %q", err, out.String())
	}
	// Long-running: no hidden deadline on a 3 s command.
	res, err = c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"sleep", "3"}}, warden.ExecIO{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sleep 3: %v %+v", err, res)
	}
	// Background: start, drop the stream, reconnect and replay.
	ps, err := c.StartProcess(ctx, sb.ID, warden.ExecRequest{Command: "echo one; sleep 1; echo two; sleep 600", Tag: "bg"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	pid := ps.PID()
	ps.Close()
	time.Sleep(1500 * time.Millisecond)
	procs, err := c.Processes(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs {
		if p.PID == pid && p.Tag == "bg" && !p.Exited {
			found = true
		}
	}
	if !found {
		t.Fatalf("background process %d not listed as running: %+v", pid, procs)
	}
	rs, err := c.StreamProcess(ctx, sb.ID, pid, true)
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	var got strings.Builder
	for !strings.Contains(got.String(), "two") {
		ev, err := rs.Next()
		if err != nil {
			t.Fatalf("replay: %v (got %q)", err, got.String())
		}
		got.Write(ev.Data)
	}
	if got.String() != "one\ntwo\n" {
		t.Fatalf("replayed %q", got.String())
	}
	if err := c.Signal(ctx, sb.ID, pid, warden.SIGKILL); err != nil {
		t.Fatalf("signal: %v", err)
	}
	for {
		ev, err := rs.Next()
		if err != nil {
			t.Fatalf("after kill: %v", err)
		}
		if ev.Type == warden.EventEnd {
			if ev.Signal != 9 {
				t.Fatalf("end after SIGKILL: %+v", ev)
			}
			break
		}
	}
	rs.Close()
}

func testPTY(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	sb := create(t, c, warden.CreateSandboxRequest{})
	p, err := c.PTY(ctx, sb.ID, warden.PTYOptions{Cols: 90, Rows: 30, Cmd: "/bin/bash"})
	if err != nil {
		t.Fatalf("pty: %v", err)
	}
	defer p.Close()
	if _, err := p.Write([]byte("stty size; echo $((6*7)); exit 5\n")); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p)
	code, err := p.Wait()
	if err != nil || code != 5 {
		t.Fatalf("pty exit = %d, %v; output %q", code, err, out)
	}
	if !bytes.Contains(out, []byte("30 90")) || !bytes.Contains(out, []byte("42")) {
		t.Fatalf("pty output %q", out)
	}
}

func testFiles(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	sb := create(t, c, warden.CreateSandboxRequest{})
	w, err := c.Watch(ctx, sb.ID, "/home/user", true)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Close()
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/notes/a.txt", strings.NewReader("alpha"), warden.WriteOptions{}); err != nil {
		t.Fatalf("write: %v", err)
	}
	r, err := c.ReadFile(ctx, sb.ID, "/home/user/notes/a.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "alpha" {
		t.Fatalf("read %q", b)
	}
	e, err := c.Stat(ctx, sb.ID, "/home/user/notes/a.txt")
	if err != nil || e.Size != 5 || e.Owner != "user" {
		t.Fatalf("stat: %+v %v", e, err)
	}
	if _, err := c.Mkdir(ctx, sb.ID, "/home/user/d1/d2"); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if _, err := c.Move(ctx, sb.ID, "/home/user/notes/a.txt", "/home/user/d1/b.txt"); err != nil {
		t.Fatalf("move: %v", err)
	}
	ents, err := c.List(ctx, sb.ID, "/home/user/d1", 1)
	if err != nil || len(ents) != 2 {
		t.Fatalf("list: %+v %v", ents, err)
	}
	// Archive round trip.
	arc, err := c.DownloadArchive(ctx, sb.ID, "/home/user/d1")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	raw, _ := io.ReadAll(arc)
	arc.Close()
	if err := c.UploadArchive(ctx, sb.ID, "/tmp/copy", bytes.NewReader(raw)); err != nil {
		t.Fatalf("upload: %v", err)
	}
	r, err = c.ReadFile(ctx, sb.ID, "/tmp/copy/b.txt", warden.ReadOptions{})
	if err != nil {
		t.Fatalf("read copy: %v", err)
	}
	b, _ = io.ReadAll(r)
	r.Close()
	if string(b) != "alpha" {
		t.Fatalf("copy holds %q", b)
	}
	// A tar-slip archive is refused and writes nothing outside.
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../../../etc/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	if err := c.UploadArchive(ctx, sb.ID, "/tmp/slip", &evil); err == nil {
		t.Fatal("tar slip accepted")
	}
	if _, err := c.Stat(ctx, sb.ID, "/etc/evil"); !warden.IsNotFound(err) {
		t.Fatalf("tar slip wrote /etc/evil: %v", err)
	}
	if err := c.Remove(ctx, sb.ID, "/home/user/d1"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := c.Stat(ctx, sb.ID, "/home/user/d1"); !warden.IsNotFound(err) {
		t.Fatalf("stat after remove: %v", err)
	}
	// Presigned URL: works with plain HTTP, refuses a tampered signature.
	pu, err := c.Presign(ctx, sb.ID, warden.PresignRequest{Path: "/tmp/copy/b.txt", Op: "read", ExpiresSeconds: 60})
	if err != nil {
		t.Fatalf("presign: %v", err)
	}
	resp, err := http.Get(pu.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "alpha" {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, b)
	}
	resp, err = http.Get(strings.Replace(pu.URL, "b.txt", "c.txt", 1))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("tampered presigned URL got %d", resp.StatusCode)
		}
	}
	// The watch saw the write.
	deadline := time.After(10 * time.Second)
	evc := make(chan warden.WatchEvent, 64)
	go func() {
		for {
			ev, err := w.Next()
			if err != nil {
				close(evc)
				return
			}
			evc <- ev
		}
	}()
	for {
		select {
		case ev, ok := <-evc:
			if !ok {
				t.Fatal("watch ended without the create event")
			}
			if strings.HasSuffix(ev.Name, "a.txt") {
				return
			}
		case <-deadline:
			t.Fatal("no watch event for notes/a.txt")
		}
	}
}

func testTimeout(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	sb := create(t, c, warden.CreateSandboxRequest{TimeoutSeconds: 2})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "stopped" {
			if !strings.Contains(got.EndReason, "timeout") {
				t.Fatalf("end reason %q", got.EndReason)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("sandbox with a 2 s timeout still running after 20 s")
}

func testAuthz(t *testing.T, d *daemon, admin *warden.Client) {
	ctx := ctxT(t)
	agent := func(name string, scopes ...string) (*warden.Client, warden.CreatedKey) {
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: name})
		if err != nil {
			t.Fatalf("create principal: %v", err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name, Scopes: scopes})
		if err != nil {
			t.Fatalf("create key: %v", err)
		}
		return d.client(t, k.Key), k
	}
	all := []string{"sandboxes:create", "sandboxes:read", "sandboxes:exec", "sandboxes:delete", "files:read", "files:write"}
	a, _ := agent("agent-a", all...)
	b, kb := agent("agent-b", all...)
	sa := create(t, a, warden.CreateSandboxRequest{})
	if _, err := b.GetSandbox(ctx, sa.ID); !warden.IsNotFound(err) {
		t.Errorf("B get A's sandbox: %v, want 404", err)
	}
	page, err := b.ListSandboxes(ctx, warden.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range page.Sandboxes {
		if sb.ID == sa.ID {
			t.Error("B lists A's sandbox")
		}
	}
	if _, err := b.Exec(ctx, sa.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsNotFound(err) {
		t.Errorf("B exec in A's sandbox: %v, want 404", err)
	}
	if _, err := b.ReadFile(ctx, sa.ID, "/etc/hostname", warden.ReadOptions{}); !warden.IsNotFound(err) {
		t.Errorf("B read A's file: %v, want 404", err)
	}
	if err := b.KillSandbox(ctx, sa.ID); !warden.IsNotFound(err) {
		t.Errorf("B kill A's sandbox: %v, want 404", err)
	}
	if got, _ := a.GetSandbox(ctx, sa.ID); got.State != "running" {
		t.Errorf("A's sandbox is %s after B's attempts", got.State)
	}
	// A key without a scope gets 403.
	ro, _ := agent("read-only", "sandboxes:read")
	if _, err := ro.CreateSandbox(ctx, warden.CreateSandboxRequest{}); !warden.IsForbidden(err) {
		t.Errorf("create without sandboxes:create: %v, want 403", err)
	}
	// A revoked key is refused at once.
	if err := admin.RevokeKey(ctx, kb.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListSandboxes(ctx, warden.ListOptions{}); !warden.IsUnauthenticated(err) {
		t.Errorf("revoked key: %v, want 401", err)
	}
	// Denied attempts are audited.
	ev, err := admin.ListAudit(ctx, warden.AuditQuery{Target: sa.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, e := range ev.Events {
		if e.Outcome == warden.OutcomeDenied {
			denied++
		}
	}
	if denied == 0 {
		t.Error("no denied audit events for B's attempts")
	}
}

func testCLI(t *testing.T, d *daemon) {
	out, errb, code := d.cli(t, "", "sandbox", "create", "--meta", "via=cli")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errb)
	}
	id := strings.TrimSpace(out)
	defer d.cli(t, "", "sandbox", "kill", id)
	if out, _, code := d.cli(t, "", "sandbox", "ls"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("ls: %d %q", code, out)
	}
	if out, _, code := d.cli(t, "", "sandbox", "inspect", "--json", id); code != 0 || !strings.Contains(out, `"state"`) {
		t.Fatalf("inspect: %d %q", code, out)
	}
	out, errb, code = d.cli(t, "", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || errb != "err\n" {
		t.Fatalf("exec: code %d out %q err %q", code, out, errb)
	}
	if out, _, code := d.cli(t, "piped\n", "exec", "-i", id, "--", "cat"); code != 0 || out != "piped\n" {
		t.Fatalf("exec -i: %d %q", code, out)
	}
	local := t.TempDir()
	os.WriteFile(local+"/f.txt", []byte("from host"), 0o644)
	if _, errb, code := d.cli(t, "", "cp", local+"/f.txt", id+":/home/user/f.txt"); code != 0 {
		t.Fatalf("cp up: %d %s", code, errb)
	}
	if out, _, code := d.cli(t, "", "fs", "cat", id, "/home/user/f.txt"); code != 0 || out != "from host" {
		t.Fatalf("fs cat: %d %q", code, out)
	}
	if out, _, code := d.cli(t, "", "fs", "ls", id, "/home/user"); code != 0 || !strings.Contains(out, "f.txt") {
		t.Fatalf("fs ls: %d %q", code, out)
	}
	if _, errb, code := d.cli(t, "", "cp", id+":/home/user", local+"/back"); code != 0 {
		t.Fatalf("cp dir down: %d %s", code, errb)
	}
	if b, err := os.ReadFile(local + "/back/f.txt"); err != nil || string(b) != "from host" {
		t.Fatalf("copied back: %q %v", b, err)
	}
	if _, _, code := d.cli(t, "", "sandbox", "timeout", id, "10m"); code != 0 {
		t.Fatalf("timeout: %d", code)
	}
	if _, errb, code := d.cli(t, "", "sandbox", "kill", id); code != 0 {
		t.Fatalf("kill: %d %s", code, errb)
	}
	if out, _, code := d.cli(t, "", "audit", "ls"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("audit ls: %d", code)
	}
	if out, errb, code := d.cli(t, "", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: %d %s %s", code, out, errb)
	}
	// Errors say what to do next.
	_, errb, code = d.cli(t, "", "sandbox", "inspect", "sb-nope")
	if code == 0 || !strings.HasPrefix(errb, "warden: ") {
		t.Fatalf("missing sandbox: %d %q", code, errb)
	}
	_ = errors.New
}
