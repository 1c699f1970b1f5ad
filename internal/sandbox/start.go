package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/template"
)

// Defaults of a template's readiness check.
const (
	defaultReadyTimeout  = 30 * time.Second
	defaultReadyInterval = 50 * time.Millisecond
	startOutputMax       = 8 << 10 // bytes of start command output kept for errors
)

// ErrNotReady is returned when a template's start command exits or its
// ready check does not pass in time; the message carries the output.
var ErrNotReady = errkind.Sentinel(errkind.Invalid, "sandbox did not become ready", errkind.WithDetail)

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// runStart starts a template's start command in a new sandbox and waits
// for its ready check. The command runs in the background, tagged "start",
// for the sandbox's whole life; an error says why the sandbox is not ready
// and holds the command's last output.
func runStart(ctx context.Context, c *agentclient.Client, st *template.Start) error {
	if st == nil || len(st.Cmd) == 0 {
		return nil
	}
	out := &tail{max: startOutputMax}
	stream, err := c.Start(context.WithoutCancel(ctx), agentclient.Cmd{Args: st.Cmd, Env: st.Env, User: st.User, Dir: st.Dir, Tag: "start"})
	if err != nil {
		return fmt.Errorf("%w: start command: %w", ErrNotReady, err)
	}
	exited := make(chan string, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if d := ev.GetData(); d != nil {
				out.Write(d.GetStdout())
				out.Write(d.GetStderr())
			}
			if e := ev.GetEnd(); e != nil {
				exited <- e.GetStatus()
				return
			}
		}
		exited <- "stream closed"
	}()
	ready := st.Ready
	if ready == nil || (len(ready.Cmd) == 0 && ready.Port == 0) {
		return nil // ready once started
	}
	timeout := time.Duration(ready.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = defaultReadyTimeout
	}
	interval := time.Duration(ready.IntervalMS) * time.Millisecond
	if interval <= 0 {
		interval = defaultReadyInterval
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ok, detail := check(ctx, c, ready, st)
		if ok {
			return nil
		}
		select {
		case status := <-exited:
			return fmt.Errorf("%w: start command %q ended (%s) before the ready check passed; output: %s", ErrNotReady, st.Cmd, status, out)
		case <-deadline.C:
			return fmt.Errorf("%w: ready check did not pass within %s (%s); start command output: %s", ErrNotReady, timeout, detail, out)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// check runs one readiness check.
func check(ctx context.Context, c *agentclient.Client, r *template.Ready, st *template.Start) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r.Port > 0 {
		// Dial the port inside the sandbox through the agent.
		err := c.CheckPort(cctx, r.Port)
		if err != nil {
			return false, "port " + strconv.Itoa(r.Port) + ": " + err.Error()
		}
		return true, ""
	}
	var o tail
	o.max = 512
	res, err := c.Run(cctx, agentclient.Cmd{Args: r.Cmd, User: st.User, Env: st.Env, Stdout: &o, Stderr: &o})
	if err != nil {
		return false, "check: " + err.Error()
	}
	if res.ExitCode != 0 {
		return false, fmt.Sprintf("check %q exited %d: %s", r.Cmd, res.ExitCode, o.String())
	}
	return true, ""
}
