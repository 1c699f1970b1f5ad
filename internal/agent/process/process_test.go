package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
)

func TestEchoAndExitCodes(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		r := run(t, e, sh("echo out; echo err >&2; exit 3"))
		if r.stdout.String() != "out\n" || r.stderr.String() != "err\n" {
			t.Errorf("stdout %q stderr %q", r.stdout.String(), r.stderr.String())
		}
		if r.end.ExitCode != 3 || !r.end.Exited || r.end.Status != "exit status 3" || r.end.Signal != 0 || r.end.Error != nil {
			t.Errorf("end = %v", r.end)
		}
		r = run(t, e, startReq("true"))
		if r.end.ExitCode != 0 || !r.end.Exited || r.end.Status != "exit status 0" {
			t.Errorf("end = %v", r.end)
		}
		if r.output() != "" {
			t.Errorf("output %q", r.output())
		}
		r = run(t, e, startReq("echo", "a b", "c"))
		if r.stdout.String() != "a b c\n" {
			t.Errorf("argv: %q", r.stdout.String())
		}
	})
}

func TestHTTP1JSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{json: true, http1: true})
	r := run(t, e, sh("echo hi"))
	if r.stdout.String() != "hi\n" || r.end.Status != "exit status 0" {
		t.Errorf("stdout %q end %v", r.stdout.String(), r.end)
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "mytool"), []byte("#!/bin/sh\necho mytool ran\n"), 0o755)
	cfg := Config{Env: func() map[string]string {
		return map[string]string{"FROM_SANDBOX": "sandbox", "OVERRIDE": "sandbox", "HOME": "/sandbox-home"}
	}}
	forCodecs(t, cfg, func(t *testing.T, e *testEnv) {
		req := startReq("env")
		req.Msg.Process.Envs = map[string]string{"OVERRIDE": "request", "FROM_REQUEST": "request"}
		r := run(t, e, req)
		env := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout.String()), "\n") {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
		want := map[string]string{
			"PATH": DefaultPath, "HOME": "/sandbox-home", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/sh",
			"FROM_SANDBOX": "sandbox", "OVERRIDE": "request", "FROM_REQUEST": "request",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s=%q, want %q", k, env[k], v)
			}
		}
		if len(env) != len(want) {
			t.Errorf("environment has extra variables (agent environment inherited?): %v", env)
		}
		if _, ok := env["WARDEN_AGENT_SECRET"]; ok {
			t.Errorf("agent environment leaked")
		}

		// A bare command name is looked up in the process's PATH.
		req = startReq("mytool")
		req.Msg.Process.Envs = map[string]string{"PATH": bin + ":/usr/bin:/bin"}
		if r := run(t, e, req); r.stdout.String() != "mytool ran\n" {
			t.Errorf("mytool: %q %v", r.output(), r.end)
		}
		startErr(t, e, startReq("mytool"), connect.CodeNotFound)
	})
}

func TestCwd(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	os.Mkdir(filepath.Join(rootHome, "sub"), 0o755)
	e := newEnv(t, envOpts{cfg: Config{DefaultWorkdir: work}})
	if r := run(t, e, startReq("pwd")); r.stdout.String() != work+"\n" {
		t.Errorf("default cwd: %q", r.stdout.String())
	}
	for cwd, want := range map[string]string{"/tmp": "/tmp", "~": rootHome, "sub": filepath.Join(rootHome, "sub"), "~/sub": filepath.Join(rootHome, "sub")} {
		req := startReq("pwd")
		req.Msg.Process.Cwd = &cwd
		if r := run(t, e, req); r.stdout.String() != want+"\n" {
			t.Errorf("cwd %q: got %q want %q", cwd, r.stdout.String(), want)
		}
	}
	missing := "/nonexistent/dir"
	req := startReq("pwd")
	req.Msg.Process.Cwd = &missing
	startErr(t, e, req, connect.CodeInvalidArgument)
	file := filepath.Join(work, "file")
	os.WriteFile(file, nil, 0o644)
	req = startReq("pwd")
	req.Msg.Process.Cwd = &file
	startErr(t, e, req, connect.CodeInvalidArgument)

	// Without DefaultWorkdir: the user's home.
	e2 := newEnv(t, envOpts{})
	if r := run(t, e2, startReq("pwd")); r.stdout.String() != rootHome+"\n" {
		t.Errorf("home cwd: %q", r.stdout.String())
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		err := startErr(t, e, startReq("definitely-not-a-command-xyz"), connect.CodeNotFound)
		if !strings.Contains(err.Error(), "definitely-not-a-command-xyz") {
			t.Errorf("error does not name the command: %v", err)
		}
		startErr(t, e, startReq("/nonexistent/bin"), connect.CodeNotFound)
		noexec := filepath.Join(t.TempDir(), "noexec")
		os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
		startErr(t, e, startReq(noexec), connect.CodePermissionDenied)
		startErr(t, e, startReq(""), connect.CodeInvalidArgument)
		req := startReq("true")
		asUser(req, "nobody-such-user")
		startErr(t, e, req, connect.CodeInvalidArgument)
		req = startReq("true")
		req.Msg.Process.Envs = map[string]string{"A=B": "x"}
		startErr(t, e, req, connect.CodeInvalidArgument)
		// A script whose interpreter is missing fails at exec time.
		badInterp := filepath.Join(t.TempDir(), "bad")
		os.WriteFile(badInterp, []byte("#!/nonexistent/interp\n"), 0o755)
		startErr(t, e, startReq(badInterp), connect.CodeNotFound)
	})
}

func TestStdin(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		s, err := e.client.Start(ctx, startReq("cat")) // stdin absent: a pipe
		if err != nil {
			t.Fatal(err)
		}
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return r.pid != 0 })
		pid := sr.r.pid
		for _, in := range []string{"hello ", "world\n"} {
			_, err := e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
				Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(in)}}}))
			if err != nil {
				t.Fatalf("send input: %v", err)
			}
		}
		sr.until(func(r *result) bool { return r.stdout.String() == "hello world\n" })
		if _, err := e.client.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(pid)})); err != nil {
			t.Fatalf("close stdin: %v", err)
		}
		r := sr.all()
		if r.end == nil || r.end.ExitCode != 0 {
			t.Fatalf("end %v err %v", r.end, r.err)
		}

		// stdin false: /dev/null, cat ends at once; input is refused.
		req := startReq("cat")
		no := false
		req.Msg.Stdin = &no
		if r := run(t, e, req); r.end.ExitCode != 0 || r.output() != "" {
			t.Errorf("cat </dev/null: %v %q", r.end, r.output())
		}
		req = sh("sleep 0.3")
		req.Msg.Stdin = &no
		s, err = e.client.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		sr = newReader(t, s)
		sr.until(func(r *result) bool { return r.pid != 0 })
		_, err = e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(sr.r.pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("input to stdin=false process: %v", err)
		}
		_, err = e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(sr.r.pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("x")}}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("pty input to a pipe process: %v", err)
		}
		sr.all()

		// Unknown pid.
		_, err = e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(1 << 30), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("input to unknown pid: %v", err)
		}
		_, err = e.client.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(1 << 30)}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("close stdin of unknown pid: %v", err)
		}
	})
}

func TestStreamInput(t *testing.T) {
	t.Parallel()
	// connect-go client streams need HTTP/2 (full duplex not required).
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		tag := "catter"
		req := startReq("cat")
		req.Msg.Tag = &tag
		s, err := e.client.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return r.pid != 0 })
		in := e.client.StreamInput(ctx)
		data := func(b string) *pb.StreamInputRequest {
			return &pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{
				Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(b)}}}}}
		}
		msgs := []*pb.StreamInputRequest{
			{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: tagSel(tag)}}},
			data("one\n"),
			{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
			data("two\n"),
		}
		for _, m := range msgs {
			if err := in.Send(m); err != nil {
				t.Fatalf("stream input send: %v", err)
			}
		}
		if _, err := in.CloseAndReceive(); err != nil {
			t.Fatalf("stream input: %v", err)
		}
		sr.until(func(r *result) bool { return r.stdout.String() == "one\ntwo\n" })
		e.client.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: tagSel(tag)}))
		if r := sr.all(); r.end == nil || r.end.ExitCode != 0 {
			t.Errorf("end %v", r.end)
		}

		// Data before start.
		in = e.client.StreamInput(ctx)
		in.Send(data("x"))
		if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("data before start: %v", err)
		}
	})
}

func TestSignals(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		start := func(script string) *streamReader[pb.StartResponse] {
			s, err := e.client.Start(ctx, sh(script))
			if err != nil {
				t.Fatal(err)
			}
			sr := newReader(t, s)
			sr.until(func(r *result) bool { return strings.Contains(r.stdout.String(), "ready") })
			return sr
		}
		// A trapped signal.
		sr := start(`trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done`)
		if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGUSR1); err != nil {
			t.Fatal(err)
		}
		r := sr.all()
		if !strings.Contains(r.stdout.String(), "got-usr1") || r.end.ExitCode != 7 {
			t.Errorf("usr1: %q %v", r.stdout.String(), r.end)
		}

		for sig, status := range map[pb.Signal]string{
			pb.Signal_SIGNAL_SIGKILL: "signal: killed",
			pb.Signal_SIGNAL_SIGTERM: "signal: terminated",
			pb.Signal_SIGNAL_SIGINT:  "signal: interrupt",
			pb.Signal_SIGNAL_SIGHUP:  "signal: hangup",
		} {
			sr := start(`echo ready; exec sleep 100`)
			if err := sendSignal(t, e, pidSel(sr.r.pid), sig); err != nil {
				t.Fatal(err)
			}
			r := sr.all()
			if r.end.Status != status || r.end.Exited || r.end.ExitCode != -1 || r.end.Signal == 0 {
				t.Errorf("%v: end %v", sig, r.end)
			}
		}

		// STOP and CONT: a stopped process produces no end event.
		sr = start(`echo ready; i=0; while [ $i -lt 40 ]; do i=$((i+1)); sleep 0.05; done; echo finished`)
		if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGCONT); err != nil {
			t.Fatal(err)
		}
		if r := sr.all(); r.end.ExitCode != 0 || !strings.Contains(r.stdout.String(), "finished") {
			t.Errorf("stop/cont: %q %v", r.stdout.String(), r.end)
		}

		// The whole process group is signalled.
		sr = start(`sleep 100 & echo child=$!; echo ready; wait`)
		child, _ := strconv.Atoi(strings.TrimPrefix(strings.Fields(sr.r.stdout.String())[0], "child="))
		if child == 0 || !alive(child) {
			t.Fatalf("child %d not running: %q", child, sr.r.stdout.String())
		}
		sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGTERM)
		sr.all()
		eventually(t, 5*time.Second, "background child killed and reaped", func() bool { return !exists(child) })

		if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_UNSPECIFIED); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("unspecified signal: %v", err)
		}
		if err := sendSignal(t, e, pidSel(1<<30), pb.Signal_SIGNAL_SIGKILL); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("unknown pid: %v", err)
		}
		// The group is gone: signalling the retained process is not_found.
		if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGKILL); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("exited process: %v", err)
		}
	})
}

func TestDisconnectThenReplay(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.client.Start(ctx, sh(`echo first; sleep 0.5; echo second; echo err-line >&2; exec sleep 100`))
		if err != nil {
			t.Fatal(err)
		}
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return r.stdout.String() == "first\n" })
		pid := sr.r.pid
		cancel() // the client goes away
		s.Close()
		time.Sleep(800 * time.Millisecond)
		if !alive(int(pid)) {
			t.Fatalf("process %d died with its client", pid)
		}

		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		// Replay gets the earlier output. Waiting for all of it here also
		// makes sure the process has written everything before the live
		// Connect below (no timing assumption on a loaded machine).
		rep := connectTo(t, e, cctx, pidSel(pid), true)
		rep.until(func(r *result) bool {
			return r.stdout.String() == "first\nsecond\n" && r.stderr.String() == "err-line\n"
		})
		// Live Connect sees nothing from before.
		live := connectTo(t, e, cctx, pidSel(pid), false)
		live.until(func(r *result) bool { return r.pid != 0 })
		if live.r.pid != pid {
			t.Errorf("connect start pid %d, want %d", live.r.pid, pid)
		}
		if err := sendSignal(t, e, pidSel(pid), pb.Signal_SIGNAL_SIGKILL); err != nil {
			t.Fatal(err)
		}
		for _, sr := range []*streamReader[pb.ConnectResponse]{live, rep} {
			r := sr.all()
			if r.end == nil || r.end.Status != "signal: killed" {
				t.Errorf("end %v err %v", r.end, r.err)
			}
		}
		if live.r.output() != "" {
			t.Errorf("live connect got earlier output %q", live.r.output())
		}
		// After exit: still connectable, with replay and end.
		r := connectTo(t, e, cctx, pidSel(pid), true).all()
		if r.stdout.String() != "first\nsecond\n" || r.end == nil || r.end.Signal != 9 {
			t.Errorf("connect after exit: %q %v", r.output(), r.end)
		}
		r = connectTo(t, e, cctx, pidSel(pid), false).all()
		if r.output() != "" || r.end == nil || r.pid != pid {
			t.Errorf("connect after exit without replay: %q %v", r.output(), r.end)
		}
		if r := connectTo(t, e, cctx, pidSel(1<<30), false).all(); connect.CodeOf(r.err) != connect.CodeNotFound || r.pid != 0 {
			t.Errorf("connect unknown pid: %v", r.err)
		}
	})
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		t0 := time.Now()
		s, err := e.client.Start(ctx, sh("echo started; exec sleep 30"))
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(t, s).all()
		if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded || r.end != nil {
			t.Fatalf("err %v end %v", r.err, r.end)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("deadline took %v", d)
		}
		// The process was killed at the deadline.
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		rr := connectTo(t, e, cctx, pidSel(r.pid), true).all()
		if rr.end == nil || rr.end.Status != "signal: killed" || rr.stdout.String() != "started\n" {
			t.Errorf("after deadline: %q %v %v", rr.output(), rr.end, rr.err)
		}

		// The deadline kills the process even after its client left.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		s, err = e.client.Start(ctx2, sh("echo started; exec sleep 30"))
		if err != nil {
			t.Fatal(err)
		}
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return r.stdout.Len() > 0 })
		cancel2()
		s.Close()
		time.Sleep(300 * time.Millisecond)
		if !alive(int(sr.r.pid)) {
			t.Fatalf("process died on disconnect, before its deadline")
		}
		rr = connectTo(t, e, cctx, pidSel(sr.r.pid), false).all()
		if rr.end == nil || rr.end.Status != "signal: killed" {
			t.Errorf("after deadline without client: %v %v", rr.end, rr.err)
		}

		// A deadline on Connect ends the stream only.
		s, err = e.client.Start(context.Background(), sh("echo started; exec sleep 30"))
		if err != nil {
			t.Fatal(err)
		}
		sr = newReader(t, s)
		sr.until(func(r *result) bool { return r.stdout.Len() > 0 })
		ctx3, cancel3 := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel3()
		rr = connectTo(t, e, ctx3, pidSel(sr.r.pid), false).all()
		if connect.CodeOf(rr.err) != connect.CodeDeadlineExceeded {
			t.Errorf("connect deadline: %v", rr.err)
		}
		if !alive(int(sr.r.pid)) {
			t.Errorf("connect deadline killed the process")
		}
		sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGKILL)
		sr.all()
	})
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{json: true})
	req := sh("sleep 1.1; echo done")
	req.Header().Set(KeepaliveHeader, "0.3")
	r := run(t, e, req)
	if r.keepalives < 2 || r.stdout.String() != "done\n" {
		t.Errorf("%d keepalives, output %q", r.keepalives, r.output())
	}
	if r := run(t, e, sh("sleep 0.5")); r.keepalives != 0 {
		t.Errorf("default interval: %d keepalives in 0.5 s", r.keepalives)
	}
}

func TestPTY(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		req := sh(`stty size; read line; stty size; echo "line=$line"; [ -t 0 ] && echo tty; exit 4`)
		req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Rows: 24, Cols: 80}}
		s, err := e.client.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return strings.Contains(r.pty.String(), "24 80") })
		pid := sr.r.pid
		if _, err := e.client.Update(ctx, connect.NewRequest(&pb.UpdateRequest{
			Process: pidSel(pid), Pty: &pb.PTY{Size: &pb.PTY_Size{Rows: 40, Cols: 100}}})); err != nil {
			t.Fatalf("update: %v", err)
		}
		if _, err := e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("hello\n")}}})); err != nil {
			t.Fatalf("send input: %v", err)
		}
		r := sr.all()
		out := r.pty.String()
		for _, want := range []string{"40 100", "line=hello", "tty"} {
			if !strings.Contains(out, want) {
				t.Errorf("pty output %q lacks %q", out, want)
			}
		}
		if r.stdout.Len()+r.stderr.Len() != 0 {
			t.Errorf("pty process sent stdout/stderr events")
		}
		if r.end == nil || r.end.ExitCode != 4 {
			t.Errorf("end %v", r.end)
		}
		// Resizing a pipe process fails.
		s, err = e.client.Start(ctx, sh("sleep 0.3"))
		if err != nil {
			t.Fatal(err)
		}
		sr2 := newReader(t, s)
		sr2.until(func(r *result) bool { return r.pid != 0 })
		_, err = e.client.Update(ctx, connect.NewRequest(&pb.UpdateRequest{
			Process: pidSel(sr2.r.pid), Pty: &pb.PTY{Size: &pb.PTY_Size{Rows: 40, Cols: 100}}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("resize pipe process: %v", err)
		}
		sr2.all()
	})
}

func TestPTYInteractiveBash(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("SKIPPED LOUDLY: /bin/bash is absent")
	}
	e := newEnv(t, envOpts{json: true})
	ctx := context.Background()
	req := startReq("/bin/bash", "--norc", "--noprofile", "-i")
	req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Rows: 30, Cols: 120}}
	req.Msg.Process.Envs = map[string]string{"TERM": "xterm-256color", "PS1": "$ "}
	s, err := e.client.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sr := newReader(t, s)
	sr.until(func(r *result) bool { return r.pid != 0 })
	send := func(in string) {
		if _, err := e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(sr.r.pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(in)}}})); err != nil {
			t.Fatalf("send input: %v", err)
		}
	}
	send("echo $((6*7)); stty size\n")
	sr.until(func(r *result) bool {
		return strings.Contains(r.pty.String(), "42") && strings.Contains(r.pty.String(), "30 120")
	})
	send("exit 5\n")
	if r := sr.all(); r.end == nil || r.end.ExitCode != 5 {
		t.Errorf("end %v, output %q", r.end, r.pty.String())
	}
}

func TestListAndTags(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		tag := "server"
		req := sh("echo ready; exec sleep 100")
		req.Msg.Tag = &tag
		req.Msg.Process.Envs = map[string]string{"K": "V"}
		s, err := e.client.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		srv := newReader(t, s)
		srv.until(func(r *result) bool { return r.stdout.Len() > 0 })

		// Tags are unique among live processes.
		dup := sh("true")
		dup.Msg.Tag = &tag
		startErr(t, e, dup, connect.CodeAlreadyExists)

		done := run(t, e, sh("exit 2"))

		res, err := e.client.List(ctx, connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		byPid := map[uint32]*pb.ProcessInfo{}
		for _, p := range res.Msg.Processes {
			byPid[p.Pid] = p
		}
		p := byPid[srv.r.pid]
		if p == nil || p.GetTag() != tag || p.Exited || p.User != "root" || p.Config.GetCmd() != "/bin/sh" ||
			p.Config.GetEnvs()["K"] != "V" || len(p.Config.GetArgs()) != 2 || p.Config.GetCwd() != rootHome {
			t.Errorf("list entry of live process: %v", p)
		}
		if q := byPid[done.pid]; q == nil || !q.Exited || q.Tag != nil {
			t.Errorf("list entry of exited process: %v", q)
		}

		// Connect and signal by tag.
		c := connectTo(t, e, ctx, tagSel(tag), true)
		c.until(func(r *result) bool { return r.stdout.String() == "ready\n" })
		if err := sendSignal(t, e, tagSel(tag), pb.Signal_SIGNAL_SIGTERM); err != nil {
			t.Fatal(err)
		}
		if r := c.all(); r.end == nil || r.end.Status != "signal: terminated" {
			t.Errorf("end %v", r.end)
		}
		srv.all()
		// Once it has ended, the tag can be reused.
		again := sh("echo again")
		again.Msg.Tag = &tag
		r := run(t, e, again)
		if r.stdout.String() != "again\n" {
			t.Errorf("reused tag: %q", r.output())
		}
		rr := connectTo(t, e, ctx, tagSel(tag), true).all()
		if rr.pid != r.pid {
			t.Errorf("tag resolves to pid %d, want the newest %d", rr.pid, r.pid)
		}
		if err := sendSignal(t, e, tagSel("no-such-tag"), pb.Signal_SIGNAL_SIGKILL); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("unknown tag: %v", err)
		}
	})
}

func TestRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: Config{Retention: time.Second}})
	r := run(t, e, sh("echo bye; exit 9"))
	ctx := context.Background()
	rr := connectTo(t, e, ctx, pidSel(r.pid), true).all()
	if rr.end == nil || rr.end.ExitCode != 9 || rr.stdout.String() != "bye\n" {
		t.Errorf("retained: %v %q", rr.end, rr.output())
	}
	time.Sleep(1500 * time.Millisecond)
	s, err := e.client.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(r.pid)}))
	if err == nil {
		for s.Receive() {
			t.Errorf("event from a forgotten process: %v", s.Msg())
		}
		err = s.Err()
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("forgotten process: %v", err)
	}
	res, _ := e.client.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if len(res.Msg.Processes) != 0 {
		t.Errorf("list after retention: %v", res.Msg.Processes)
	}
}

func TestUserSwitch(t *testing.T) {
	t.Parallel()
	needRoot(t)
	forCodecs(t, Config{DefaultUser: "user"}, func(t *testing.T, e *testEnv) {
		r := run(t, e, sh(`id -u; id -g; id -G; echo $HOME $USER; pwd; touch "$HOME/made"`))
		want := fmt.Sprintf("1000\n1000\n1000 2000\n%s user\n%s\n", userHome, userHome)
		if r.stdout.String() != want || r.end.ExitCode != 0 {
			t.Errorf("as user: %q (stderr %q), want %q", r.stdout.String(), r.stderr.String(), want)
		}
		if fi, err := os.Stat(filepath.Join(userHome, "made")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("file made by the user: %v %v", fi, err)
		}
		req := startReq("id", "-u")
		asUser(req, "root")
		if r := run(t, e, req); r.stdout.String() != "0\n" {
			t.Errorf("as root: %q", r.output())
		}
		req = startReq("id", "-u")
		asUser(req, "1000")
		if r := run(t, e, req); r.stdout.String() != "1000\n" {
			t.Errorf("as uid 1000: %q", r.output())
		}
		// The user may not enter root's private directory.
		private := filepath.Join(baseDir, "private-"+strings.ReplaceAll(t.Name(), "/", "-"))
		os.Mkdir(private, 0o700)
		req = startReq("pwd")
		req.Msg.Process.Cwd = &private
		startErr(t, e, req, connect.CodePermissionDenied)
	})
}

func TestBackgroundChildKeepsPipe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	t0 := time.Now()
	// The background sleep inherits stdout; the end must not wait for it.
	r := run(t, e, sh(`sleep 30 & echo child=$!`))
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("end took %v", d)
	}
	child, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(r.stdout.String()), "child="))
	if child == 0 || !alive(child) {
		t.Fatalf("background child %d: %q", child, r.output())
	}
	// Signalling the exited process reaches what is left of its group.
	if err := sendSignal(t, e, pidSel(r.pid), pb.Signal_SIGNAL_SIGKILL); err != nil {
		t.Fatalf("signal leftover group: %v", err)
	}
	// The orphan is reparented to us (subreaper / PID 1) and must be reaped.
	eventually(t, 5*time.Second, "orphan reaped", func() bool { return !exists(child) })
}

func TestOrphansReaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	// A double fork: the grandchild leaves the group and outlives its parent.
	r := run(t, e, sh(`setsid sh -c 'sleep 0.3' </dev/null >/dev/null 2>&1 & echo $!`))
	gc, _ := strconv.Atoi(strings.TrimSpace(r.stdout.String()))
	if gc == 0 {
		t.Fatalf("no grandchild pid: %q", r.output())
	}
	eventually(t, 5*time.Second, "orphan reaped", func() bool { return !exists(gc) })
}

func TestLargeOutputAndRing(t *testing.T) {
	t.Parallel()
	forCodecs(t, Config{}, func(t *testing.T, e *testEnv) {
		const n = 3 << 20
		r := run(t, e, sh(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo; echo tail-marker`, n)))
		if got := r.stdout.Len(); got != n+len("\ntail-marker\n") {
			t.Fatalf("stdout %d bytes, want %d", got, n+len("\ntail-marker\n"))
		}
		rr := connectTo(t, e, context.Background(), pidSel(r.pid), true).all()
		got := rr.stdout.Len()
		if got > DefaultOutputBuffer || got < DefaultOutputBuffer-readSize-64 || !strings.HasSuffix(rr.stdout.String(), "a\ntail-marker\n") {
			t.Errorf("replay: %d bytes (ring %d)", got, DefaultOutputBuffer)
		}
	})
}

func TestSlowClientDoesNotLoseOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: Config{OutputBuffer: 64 << 10}})
	s, err := e.client.Start(context.Background(), sh(`i=0; while [ $i -lt 3000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done`))
	if err != nil {
		t.Fatal(err)
	}
	sr := newReader(t, s)
	n := 0
	for sr.next() {
		if n++; n%20 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	lines := strings.Split(strings.TrimSpace(sr.r.stdout.String()), "\n")
	if len(lines) != 3000 || !strings.HasPrefix(lines[2999], "line-2999-") {
		t.Errorf("got %d lines", len(lines))
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{json: true})
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := sh(fmt.Sprintf("echo %d; echo e%d >&2; exit %d", i, i, i%5))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := e.client.Start(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			r := newReader(t, s).all()
			if r.stdout.String() != fmt.Sprintf("%d\n", i) || r.stderr.String() != fmt.Sprintf("e%d\n", i) || r.end == nil || r.end.ExitCode != int32(i%5) {
				t.Errorf("%d: %q %q %v %v", i, r.stdout.String(), r.stderr.String(), r.end, r.err)
			}
		}()
	}
	wg.Wait()
}

func TestClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	s, err := e.client.Start(context.Background(), sh("echo ready; sleep 100 & exec sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	sr := newReader(t, s)
	sr.until(func(r *result) bool { return r.stdout.Len() > 0 })
	e.svc.Close()
	if r := sr.all(); r.end == nil || r.end.Status != "signal: killed" {
		t.Errorf("end after Close: %v %v", r.end, r.err)
	}
	if !eventuallyBool(5*time.Second, func() bool { return !exists(int(sr.r.pid)) }) {
		t.Errorf("process %d still exists after Close", sr.r.pid)
	}
	startErr(t, e, sh("true"), connect.CodeUnavailable)
}

func eventuallyBool(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestNoGoroutineLeak runs before the parallel tests resume (it does not
// call t.Parallel), so the goroutine count is stable around it.
func TestNoGoroutineLeak(t *testing.T) {
	startReaper()
	if err := PrepareSpawnThread(); err != nil { // its goroutine lives for good
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	func() {
		e := newEnv(t, envOpts{})
		run(t, e, sh("echo x"))
		// A disconnected client, a deadline, a PTY, a live background process.
		ctx, cancel := context.WithCancel(context.Background())
		s, _ := e.client.Start(ctx, sh("echo x; exec sleep 100"))
		sr := newReader(t, s)
		sr.until(func(r *result) bool { return r.stdout.Len() > 0 })
		cancel()
		dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer dcancel()
		if s, err := e.client.Start(dctx, sh("exec sleep 100")); err == nil {
			newReader(t, s).all()
		}
		req := sh("stty size")
		req.Msg.Pty = &pb.PTY{}
		run(t, e, req)
		e.close()
	}()
	var after int
	ok := eventuallyBool(5*time.Second, func() bool {
		after = runtime.NumGoroutine()
		return after <= before
	})
	if !ok {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

func TestBlockedInputDoesNotHoldEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	// A background child keeps stdin open without reading it; the leader exits.
	s, err := e.client.Start(ctx, sh(`sleep 30 <&0 >/dev/null 2>&1 & echo $!; sleep 0.5`))
	if err != nil {
		t.Fatal(err)
	}
	sr := newReader(t, s)
	sr.until(func(r *result) bool { return strings.HasSuffix(r.stdout.String(), "\n") })
	child, _ := strconv.Atoi(strings.TrimSpace(sr.r.stdout.String()))
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{
			Process: pidSel(sr.r.pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: make([]byte, 4<<20)}}}))
		errc <- err
	}()
	t0 := time.Now()
	r := sr.all()
	if r.end == nil || r.end.ExitCode != 0 || time.Since(t0) > 5*time.Second {
		t.Errorf("end %v after %v", r.end, time.Since(t0))
	}
	select {
	case err := <-errc:
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("blocked input: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("input still blocked after the end")
	}
	if err := sendSignal(t, e, pidSel(sr.r.pid), pb.Signal_SIGNAL_SIGKILL); err != nil {
		t.Errorf("kill leftover child: %v", err)
	}
	eventually(t, 5*time.Second, "leftover child reaped", func() bool { return child == 0 || !exists(child) })
}
