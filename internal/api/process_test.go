package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestExec(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	a, id := env.a, env.sbA

	run := func(t *testing.T, req warden.ExecRequest, stdin io.Reader) (string, string, warden.ExitResult) {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := a.Exec(ctx, id, req, warden.ExecIO{Stdin: stdin, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("exec %+v: %v", req, err)
		}
		return out.String(), errb.String(), res
	}

	t.Run("stdout stderr exit code", func(t *testing.T) {
		out, errs, res := run(t, warden.ExecRequest{Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}}, nil)
		if out != "out\n" || errs != "err\n" || res.ExitCode != 7 || res.Success() || res.Status != "exit status 7" {
			t.Fatalf("got %q %q %+v", out, errs, res)
		}
	})
	t.Run("command through bash", func(t *testing.T) {
		out, _, res := run(t, warden.ExecRequest{Command: "echo hi | tr a-z A-Z"}, nil)
		if out != "HI\n" || !res.Success() {
			t.Fatalf("got %q %+v", out, res)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		in := strings.Repeat("line of input\n", 10000) // 140 KB: several stdin requests
		out, _, res := run(t, warden.ExecRequest{Cmd: []string{"wc", "-c"}}, strings.NewReader(in))
		if strings.TrimSpace(out) != "140000" || !res.Success() {
			t.Fatalf("got %q %+v", out, res)
		}
	})
	t.Run("env cwd user", func(t *testing.T) {
		needsRealSandbox(t)
		out, _, res := run(t, warden.ExecRequest{
			Command: `echo "$FOO $(pwd) $(id -un)"`, Env: map[string]string{"FOO": "bar baz"}, Cwd: "/tmp", User: "root",
		}, nil)
		if out != "bar baz /tmp root\n" || !res.Success() {
			t.Fatalf("got %q %+v", out, res)
		}
		out, _, _ = run(t, warden.ExecRequest{Command: `echo "$(pwd) $(id -un)"`}, nil)
		if out != "/home/user user\n" {
			t.Fatalf("defaults: got %q", out)
		}
	})
	t.Run("timeout kills", func(t *testing.T) {
		start := time.Now()
		out, _, res := run(t, warden.ExecRequest{Command: "echo started; sleep 30", TimeoutSeconds: 1}, nil)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("timeout took %v", d)
		}
		if out != "started\n" || res.Success() || res.Signal != 9 || res.ExitCode != -1 || !strings.Contains(res.Error, "timeout") {
			t.Fatalf("got %q %+v", out, res)
		}
	})
	t.Run("unknown program", func(t *testing.T) {
		_, err := a.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"/no/such/program"}}, warden.ExecIO{})
		apiErr(t, err, 404, warden.CodeNotFound)
	})
	t.Run("unknown user", func(t *testing.T) {
		_, err := a.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"true"}, User: "nobody-here"}, warden.ExecIO{})
		apiErr(t, err, 400, warden.CodeBadRequest)
	})
	t.Run("stdin closed", func(t *testing.T) {
		s, err := a.StartProcess(ctx, id, warden.ExecRequest{Cmd: []string{"cat"}, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.SendStdin(ctx, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseStdin(ctx); err != nil {
			t.Fatalf("second close-stdin: %v", err)
		}
		var out bytes.Buffer
		res, err := s.Copy(&out, nil)
		if err != nil || out.String() != "abc" || !res.Success() {
			t.Fatalf("got %q %+v %v", out.String(), res, err)
		}
		apiErr(t, s.SendStdin(ctx, []byte("late")), 409, warden.CodeConflict)
	})
}

// TestExecDetach: a client that goes away leaves the process running; it
// can be found, re-attached with replay, and signalled.
func TestExecDetach(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	a, id := env.a, env.sbA

	sctx, cancel := context.WithCancel(ctx)
	s, err := a.StartProcess(sctx, id, warden.ExecRequest{
		Command: "echo one; sleep 0.5; echo two; exec sleep 300", Tag: "detach-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	ev, err := s.Next()
	if err != nil || ev.Type != warden.EventStdout || string(ev.Data) != "one\n" {
		t.Fatalf("first output: %+v %v", ev, err)
	}
	cancel() // the client disconnects
	s.Close()
	time.Sleep(time.Second)

	procs, err := a.Processes(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(procs, func(p warden.ProcessInfo) bool { return p.PID == pid })
	if i < 0 || procs[i].Exited || procs[i].Tag != "detach-test" || procs[i].User != "user" ||
		!slices.Equal(procs[i].Cmd, []string{"/bin/bash", "-lc", "echo one; sleep 0.5; echo two; exec sleep 300"}) {
		t.Fatalf("process %d after disconnect: %+v", pid, procs)
	}

	rs, err := a.StreamProcess(ctx, id, pid, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ev, err = rs.Next()
	if err != nil || ev.Type != warden.EventStart || ev.PID != pid {
		t.Fatalf("reattach start: %+v %v", ev, err)
	}
	var replayed bytes.Buffer
	for !strings.Contains(replayed.String(), "two\n") {
		ev, err := rs.Next()
		if err != nil {
			t.Fatalf("replay: %v after %q", err, replayed.String())
		}
		replayed.Write(ev.Data)
	}

	if err := a.Signal(ctx, id, pid, warden.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := rs.Copy(nil, nil)
	if err != nil || res.Signal != 15 || res.ExitCode != -1 {
		t.Fatalf("after SIGTERM: %+v %v", res, err)
	}
	// The process has exited: a stream of it ends at once with its status.
	rs2, err := a.StreamProcess(ctx, id, pid, false)
	if err != nil {
		t.Fatal(err)
	}
	res, err = rs2.Copy(nil, nil)
	if err != nil || res.Signal != 15 {
		t.Fatalf("stream of exited process: %+v %v", res, err)
	}
	rs2.Close()

	_, err = a.StreamProcess(ctx, id, 999999, false)
	apiErr(t, err, 404, warden.CodeNotFound)
	apiErr(t, a.Signal(ctx, id, 999999, warden.SIGKILL), 404, warden.CodeNotFound)
}

func TestPTY(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	p, err := env.a.PTY(ctx, env.sbA, warden.PTYOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out syncBuffer
	done := make(chan struct{})
	go func() {
		io.Copy(&out, p)
		close(done)
	}()
	if _, err := p.Write([]byte("stty size; echo marker-$((40+2))\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "marker-42")
	if !strings.Contains(out.String(), "30 100") {
		t.Errorf("terminal size: %q", out.String())
	}
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := p.Write([]byte("stty size; exit 3\n")); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil || code != 3 {
		t.Fatalf("exit: %d %v (output %q)", code, err, out.String())
	}
	<-done
	if !strings.Contains(out.String(), "40 120") {
		t.Errorf("after resize: %q", out.String())
	}

	// Errors before the upgrade are JSON errors.
	_, err = env.b.PTY(ctx, env.sbA, warden.PTYOptions{})
	apiErr(t, err, 404, warden.CodeNotFound)
	_, err = env.a.PTY(ctx, env.sbA, warden.PTYOptions{Cmd: "/no/such/shell"})
	apiErr(t, err, 404, warden.CodeNotFound)
}

// TestPTYHangup: a terminal whose client goes away is hung up.
func TestPTYHangup(t *testing.T) {
	needsRealSandbox(t)
	ctx := ctxT(t, 30*time.Second)
	p, err := env.a.PTY(ctx, env.sbA, warden.PTYOptions{Cmd: "/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	go io.Copy(&out, p)
	// The terminal echoes the typed line: wait for output the line itself
	// does not hold ("re''ady" prints as "ready").
	p.Write([]byte("echo $$ > /tmp/pty-hangup.pid; echo re''ady\n"))
	waitFor(t, &out, "ready")
	p.Close()
	var pid bytes.Buffer
	if _, err := env.a.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"cat", "/tmp/pty-hangup.pid"}}, warden.ExecIO{Stdout: &pid}); err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.Atoi(strings.TrimSpace(pid.String())); err != nil {
		t.Fatalf("pid file holds %q", pid.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := env.a.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"kill", "-0", strings.TrimSpace(pid.String())}}, warden.ExecIO{})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Success() {
			break // gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal program %s still runs after its client left", pid.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExecWire checks the NDJSON stream byte for byte, as the spec gives it.
func TestExecWire(t *testing.T) {
	req, _ := http.NewRequest("POST", env.hs.URL+"/v1/sandboxes/"+env.sbA+"/exec", strings.NewReader(`{"cmd":["echo","hi"]}`))
	req.Header.Set("Authorization", "Bearer "+env.aKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^\{"type":"start","pid":[1-9][0-9]*\}$`).MatchString(lines[0]) ||
		lines[1] != `{"type":"stdout","data":"aGkK"}` ||
		lines[2] != `{"type":"end","exit_code":0,"signal":0,"status":"exit status 0","error":""}` {
		t.Fatalf("stream:\n%s", b)
	}
}

func TestPanicRecovery(t *testing.T) {
	s := env.srv
	h := s.requestID(s.accessLog(s.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
	body := decodeErrorBody(t, w.Result())
	if w.Code != 500 || body.Error.Code != "internal" || body.Error.Message != "internal error" ||
		body.Error.RequestID == "" || body.Error.RequestID != w.Header().Get("X-Request-Id") {
		t.Fatalf("%d %+v", w.Code, body)
	}
}
