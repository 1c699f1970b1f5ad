package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// execOptions are the flags of `warden exec`.
type execOptions struct {
	user, cwd, tag string
	env            kvFlag
	timeout        durationFlag
	interactive    bool
	tty            bool
}

func execCmd() *command {
	o := &execOptions{env: kvFlag{allowBare: true}}
	c := &command{
		name:  "exec",
		args:  "ID [--] CMD [ARG...]",
		short: "Run a command in a sandbox",
		long: "Run CMD with its arguments in the sandbox, stream its stdout and stderr, and exit with\n" +
			"its exit status (128+N when signal N killed it). With -i, local stdin is passed to it.\n" +
			"Flags go before ID, or between ID and \"--\"; everything after ID (or after \"--\") is the\n" +
			"command.\n" +
			"\n" +
			"With -t the command runs on a terminal: -it opens an interactive session that puts the\n" +
			"local terminal in raw mode and follows its size; without CMD it runs the sandbox's shell.\n" +
			"The terminal API ignores --cwd, --env, --tag and --timeout, so those are refused with\n" +
			"-t. When stdin is not a terminal, -t still works: the remote terminal is $COLUMNS x\n" +
			"$LINES (default 80x24) and the end of input is sent as Ctrl-D, so the program sees\n" +
			"end of file and can exit. If the sandbox ends during the session, warden says why.\n" +
			"\n" +
			"With --json (not with -t) the output is collected and printed at the end as one JSON\n" +
			"object: stdout, stderr, exit_code, signal, error; the exit status is still the command's.\n" +
			"\n" +
			"Ctrl-C stops warden but not the command, which keeps running in the sandbox: 'warden\n" +
			"process attach' reattaches to it and 'warden process signal' stops it.",
		examples: []string{
			"warden exec sb-01hzx3k9q2 -- ls -l /",
			"echo hello | warden exec -i sb-01hzx3k9q2 -- cat",
			"warden exec --cwd /app --env DEBUG=1 sb-01hzx3k9q2 -- python3 main.py",
			"warden exec -it sb-01hzx3k9q2",
			"warden exec -it sb-01hzx3k9q2 -- python3 -i -q",
			"warden exec --json sb-01hzx3k9q2 -- uname -a | jq -r .stdout",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&o.interactive, "interactive", "pass stdin to the command", "i")
		fs.Bool(&o.tty, "tty", "run the command on a terminal (with -i: an interactive session)", "t")
		fs.String(&o.user, "user", "U", "user to run as (default: the sandbox's)")
		fs.String(&o.cwd, "cwd", "D", "working directory (default: the sandbox's)")
		fs.Var(&o.env, "env", "K=V", "environment variable; repeatable; a bare K copies the local value")
		fs.String(&o.tag, "tag", "T", "label for the process in 'warden process ls'")
		fs.Var(&o.timeout, "timeout", "DURATION", "kill the command after this long, such as 30s or 10m (default: no limit)")
	}
	c.parseArgs = func(fs *flagSet, args []string) ([]string, error) {
		return parseExecArgs(c, fs, args)
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want a sandbox ID and a command: warden exec ID -- CMD [ARG...]")
		}
		if err := o.env.resolve(r.env.Getenv); err != nil {
			return usageErr(c, "--env %v", err)
		}
		id, argv := args[0], args[1:]
		if o.tty {
			if r.g.json {
				return usageErr(c, "--json cannot be used with -t")
			}
			return runPTY(ctx, r, c, o, id, argv)
		}
		if len(argv) == 0 {
			return usageErr(c, "want a command after the sandbox ID: warden exec %s -- CMD [ARG...]", id)
		}
		return runExec(ctx, r, o, id, argv)
	}
	return c
}

// parseExecArgs parses flags before the sandbox ID and, when the word after the ID is a
// flag, up to "--"; it returns the ID followed by the command.
func parseExecArgs(c *command, fs *flagSet, args []string) ([]string, error) {
	args = slices.Clone(args)
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "-it" || a == "-ti" {
			args = slices.Replace(args, i, i+1, "-i", "-t")
		}
	}
	rest, err := fs.parseLeading(args)
	if err != nil || len(rest) == 0 {
		return rest, err
	}
	id, rest := rest[0], rest[1:]
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-":
		end := slices.Index(rest, "--")
		if end < 0 {
			return nil, usageErr(c, "flags after the sandbox ID must end with \"--\" before the command: warden exec %s %s -- CMD", id, strings.Join(rest, " "))
		}
		flags := rest[:end]
		for i, a := range flags {
			if a == "-it" || a == "-ti" {
				flags = slices.Replace(slices.Clone(flags), i, i+1, "-i", "-t")
			}
		}
		left, err := fs.parseLeading(flags)
		if err != nil {
			return nil, err
		}
		if len(left) > 0 {
			return nil, usageErr(c, "unexpected argument %q between the sandbox ID and \"--\"", left[0])
		}
		rest = rest[end+1:]
	}
	return append([]string{id}, rest...), nil
}

// runExec runs argv without a terminal and returns its exit status as an exitError.
func runExec(ctx context.Context, r *runner, o *execOptions, id string, argv []string) error {
	cl, err := r.client()
	if err != nil {
		return err
	}
	if id, err = sandboxID(ctx, cl, id); err != nil {
		return err
	}
	req := warden.ExecRequest{
		Cmd:            argv,
		Env:            o.env.m,
		Cwd:            o.cwd,
		User:           o.user,
		Tag:            o.tag,
		Stdin:          o.interactive,
		TimeoutSeconds: o.timeout.secs,
	}
	s, err := cl.StartProcess(ctx, id, req)
	if err != nil {
		return startFailure(err, argv[0])
	}
	defer s.Close()
	return followProcess(ctx, r, cl, s, id, o.interactive)
}

// followProcess copies a process's output (and, with stdin, local stdin to it) until it
// ends, and returns its exit status as an exitError.
func followProcess(ctx context.Context, r *runner, cl *warden.Client, s *warden.ProcessStream, id string, stdin bool) error {
	pid := s.PID()
	inCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinDone := make(chan error, 1)
	if stdin {
		go func() { stdinDone <- sendStdin(inCtx, cl, id, pid, r.env.Stdin) }()
	}
	stdout, stderr := r.env.Stdout, r.env.Stderr
	var outBuf, errBuf strings.Builder
	if r.g.json {
		stdout, stderr = &outBuf, &errBuf
	}
	res, err := s.Copy(stdout, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return withHint(ctx.Err(), "process %d keeps running in sandbox %s: 'warden process attach %s %d' reattaches to it, 'warden process signal %s %d' stops it",
				pid, id, id, pid, id, pid)
		}
		return sandboxEnded(cl, id, err)
	}
	cancel()
	select {
	case serr := <-stdinDone:
		// Once the process has exited, failing to feed it is expected.
		if serr != nil && !warden.IsConflict(serr) && !warden.IsNotFound(serr) && !errors.Is(serr, context.Canceled) {
			fmt.Fprintf(r.env.Stderr, "warden: stdin: %s\n", oneLine(serr.Error()))
		}
	default:
	}
	if r.g.json {
		out := execJSON{PID: pid, Stdout: outBuf.String(), Stderr: errBuf.String(), ExitCode: res.ExitCode, Signal: res.Signal, Error: res.Error}
		if err := printJSON(r.env.Stdout, out); err != nil {
			return err
		}
		return exitCode(resultCode(res))
	}
	if res.Error != "" {
		fmt.Fprintf(r.env.Stderr, "warden: process %d: %s\n", pid, oneLine(res.Error))
	}
	return exitCode(resultCode(res))
}

// stdinChunk is the most stdin bytes sent in one request.
const stdinChunk = 64 << 10

// sendStdin copies in to the process's stdin, then closes it at end of file.
func sendStdin(ctx context.Context, cl *warden.Client, id string, pid int, in io.Reader) error {
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			if err := cl.SendStdin(ctx, id, pid, buf[:n]); err != nil {
				return err
			}
		}
		switch {
		case rerr == io.EOF:
			return cl.CloseStdin(ctx, id, pid)
		case rerr != nil:
			return fmt.Errorf("read stdin: %w", rerr)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// eot is the byte a terminal turns into end of file (Ctrl-D).
const eot = 0x04

// runPTY runs argv (or the default shell) on a terminal in the sandbox.
func runPTY(ctx context.Context, r *runner, c *command, o *execOptions, id string, argv []string) error {
	var ignored []string
	for name, set := range map[string]bool{"--cwd": o.cwd != "", "--env": len(o.env.m) > 0, "--tag": o.tag != "", "--timeout": o.timeout.secs > 0} {
		if set {
			ignored = append(ignored, name)
		}
	}
	if len(ignored) > 0 {
		slices.Sort(ignored)
		return usageErr(c, "%s cannot be used with -t: the terminal API does not take them", strings.Join(ignored, ", "))
	}
	cl, err := r.client()
	if err != nil {
		return err
	}
	if id, err = sandboxID(ctx, cl, id); err != nil {
		return err
	}
	t := r.env.Terminal
	cols, rows := terminalSize(t, r.env.Getenv)
	opts := warden.PTYOptions{Cols: cols, Rows: rows, User: o.user}
	if len(argv) > 0 {
		opts.Cmd, opts.Args = argv[0], argv[1:]
	}
	p, err := cl.PTY(ctx, id, opts)
	if err != nil {
		// The sandbox may have ended while the terminal opened.
		return sandboxEnded(cl, id, err)
	}
	defer p.Close()

	if t != nil {
		if o.interactive {
			restore, err := t.MakeRaw()
			if err != nil {
				return fmt.Errorf("put the terminal in raw mode: %w", err)
			}
			defer restore()
		}
		stop := t.NotifyResize(func() {
			if c, r, err := t.Size(); err == nil && c > 0 && r > 0 {
				_ = p.Resize(c, r)
			}
		})
		defer stop()
	}
	if o.interactive {
		go func() {
			lw := &lastByteWriter{w: p}
			_, err := io.Copy(lw, r.env.Stdin)
			if err == nil && t == nil {
				// Input from a pipe or file ended: tell the program as a terminal would.
				// Ctrl-D ends a line that has no newline yet without ending the input,
				// so that takes a second one.
				end := []byte{eot}
				if lw.n > 0 && lw.last != '\n' {
					end = append(end, eot)
				}
				_, _ = p.Write(end)
			}
		}()
	}
	if _, err := io.Copy(r.env.Stdout, p); err != nil {
		select {
		case <-p.Done(): // the session ended; Wait says how
		default: // writing the output failed; the program may still run
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("write terminal output: %w", err)
		}
	}
	code, err := p.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return sandboxEnded(cl, id, err)
	case code < 0:
		return exitCode(1)
	case code > 255:
		return exitCode(255)
	}
	return exitCode(code)
}

// startFailure gives a command that could not start the exit status a shell gives it:
// 127 when it does not exist, 126 when the sandbox's user may not run it.
func startFailure(err error, cmd string) error {
	var e *warden.Error
	if !errors.As(err, &e) {
		return err
	}
	msg := strings.TrimPrefix(e.Message, "in the sandbox: ")
	if !strings.HasPrefix(msg, "start") || strings.Contains(msg, "chdir") {
		return err
	}
	switch {
	case warden.IsNotFound(err):
		return &codedError{err: err, code: 127, hint: fmt.Sprintf("%q is not a program in the sandbox: check its name, give its full path, or install it in the template", cmd)}
	case warden.IsPermissionDenied(err):
		return &codedError{err: err, code: 126, hint: fmt.Sprintf("the sandbox's user may not run %q: check its mode (chmod +x) or pass --user", cmd)}
	}
	return err
}

// lastByteWriter remembers the last byte written through it.
type lastByteWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (l *lastByteWriter) Write(b []byte) (int, error) {
	n, err := l.w.Write(b)
	if n > 0 {
		l.n += int64(n)
		l.last = b[n-1]
	}
	return n, err
}

// sandboxEnded explains a session that broke off: when the sandbox itself ended, it says
// so ("sandbox ID ended: REASON") instead of the connection's error.
func sandboxEnded(cl *warden.Client, id string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, gerr := cl.GetSandbox(ctx, id)
	if gerr != nil || !(sb.State.Terminal() || sb.State == warden.StateStopping) {
		return err
	}
	reason := sb.EndReason
	if reason == "" {
		reason = string(sb.State)
	}
	return withHint(fmt.Errorf("sandbox %s ended: %s", id, reason), "'warden sandbox inspect %s' shows it", id)
}

// execJSON is what 'warden exec --json' prints.
type execJSON struct {
	PID      int    `json:"pid"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal"`
	Error    string `json:"error"`
}
