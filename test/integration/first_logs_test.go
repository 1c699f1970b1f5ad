package integration

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestFirstLogs drives 'warden logs' through the real CLI and daemon: the output of a
// background process started through the API, what is buffered without -f, live lines
// with -f, and the note about output the agent's ring buffer dropped.
func TestFirstLogs(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)

	out, errb, code := d.cli(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errb)
	}
	id := strings.TrimSpace(out)
	defer admin.KillSandbox(context.Background(), id)

	// A background process: the client that started it goes away at once.
	s, err := admin.StartProcess(ctx, id, warden.ExecRequest{
		Command: "echo line-one; echo err-one >&2; " +
			"while [ ! -e /tmp/go ]; do sleep 0.05; done; echo marker-two; sleep 600",
		Tag: "bg",
	})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	s.Close()

	// cliT runs the CLI with a deadline, so a 'logs' that never ends fails the test
	// instead of hanging it.
	cliT := func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := cliCmd(t, d, args...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := context.AfterFunc(cctx, func() { cmd.Process.Kill() })
		defer stop()
		cmd.Wait()
		if cctx.Err() != nil {
			t.Fatalf("warden %v did not end: stdout %q stderr %q", args, o.String(), e.String())
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	t.Run("buffered output, then the command ends", func(t *testing.T) {
		var out, errb string
		for i := 0; i < 100; i++ { // the output reaches the agent asynchronously
			var code int
			out, errb, code = cliT(t, "logs", id)
			if code != 0 {
				t.Fatalf("logs: %d %q", code, errb)
			}
			if strings.Contains(out, "line-one") && strings.Contains(errb, "err-one") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(out, "line-one") || !strings.Contains(errb, "err-one") || strings.Contains(out, "err-one") {
			t.Fatalf("stdout %q stderr %q", out, errb)
		}
	})

	t.Run("--json events name the process and stream", func(t *testing.T) {
		out, errb, code := cliT(t, "logs", "--json", "--pid", fmt.Sprint(pid), id)
		if code != 0 || !strings.Contains(out, `"stream":"stdout"`) || !strings.Contains(out, fmt.Sprintf(`"pid":%d`, pid)) {
			t.Fatalf("%d %q %q", code, out, errb)
		}
	})

	t.Run("-f follows new lines", func(t *testing.T) {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := cliCmd(t, d, "logs", "-f", "--pid", fmt.Sprint(pid), id)
		pr, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		stop := context.AfterFunc(fctx, func() { cmd.Process.Kill() })
		defer stop()
		sc := bufio.NewScanner(pr)
		if !sc.Scan() || sc.Text() != "line-one" {
			t.Fatalf("first line %q (%v)", sc.Text(), sc.Err())
		}
		// Only now does the process print its marker.
		if _, errb, code := d.cli(t, "", "exec", id, "--", "touch", "/tmp/go"); code != 0 {
			t.Fatalf("touch: %d %s", code, errb)
		}
		if !sc.Scan() || sc.Text() != "marker-two" {
			t.Fatalf("followed line %q (%v)", sc.Text(), sc.Err())
		}
	})

	t.Run("an unknown process is not found", func(t *testing.T) {
		_, errb, code := cliT(t, "logs", "--pid", "999999", id)
		if code == 0 || !strings.Contains(errb, "not found") {
			t.Fatalf("%d %q", code, errb)
		}
	})

	t.Run("dropped output is noted", func(t *testing.T) {
		res, err := admin.Exec(ctx, id, warden.ExecRequest{
			Command: "head -c 1500000 /dev/zero | tr '\\0' a; echo; echo tail-mark",
		}, warden.ExecIO{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v %+v", err, res)
		}
		ps, err := admin.Processes(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		big := 0
		for _, p := range ps {
			if p.Exited && p.PID != pid {
				big = p.PID
			}
		}
		if big == 0 {
			t.Fatalf("no exited process in %+v", ps)
		}
		out, errb, code := cliT(t, "logs", "--pid", fmt.Sprint(big), id)
		if code != 0 || !strings.HasSuffix(out, "tail-mark\n") || len(out) > 1<<20+64 ||
			!strings.Contains(errb, fmt.Sprintf("process %d's output were dropped", big)) {
			t.Fatalf("%d stdout %d bytes (ends %q) stderr %q", code, len(out), out[max(0, len(out)-20):], errb)
		}
	})
}
