package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/warden-sandbox/warden/internal/agentclient"
	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// ptyHangupGrace is how long a terminal program may take to exit after
// SIGHUP, once its WebSocket closed, before it is killed.
const ptyHangupGrace = 2 * time.Second

// ptyMaxFrame bounds a client frame (input or resize).
const ptyMaxFrame = 1 << 20

// ptyResize is the client's text frame (PtyResize schema).
type ptyResize struct {
	Type string `json:"type"`
	Cols int64  `json:"cols"`
	Rows int64  `json:"rows"`
}

// ptyExit is the server's final text frame (PtyExit schema).
type ptyExit struct {
	Type     string `json:"type"`
	ExitCode int32  `json:"exit_code"`
}

// checkUpgrade validates the WebSocket handshake headers before anything
// else, so that a bad handshake is a JSON error like every other one.
func checkUpgrade(r *http.Request) error {
	hasToken := func(h, token string) bool {
		for _, v := range r.Header.Values(h) {
			for _, t := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(t), token) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case !hasToken("Connection", "upgrade") || !hasToken("Upgrade", "websocket"):
		return apierr.BadRequest("this endpoint needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return apierr.BadRequest("unsupported WebSocket version: want Sec-WebSocket-Version 13")
	case r.Header.Get("Sec-WebSocket-Key") == "":
		return apierr.BadRequest("missing Sec-WebSocket-Key")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return apierr.Forbidden("cross-origin WebSocket refused")
		}
	}
	return nil
}

func (s *Server) pty(w http.ResponseWriter, r *http.Request) error {
	cols, err := queryInt(r, "cols", 80, 1, 65535)
	if err != nil {
		return err
	}
	rows, err := queryInt(r, "rows", 24, 1, 65535)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	cmd := q.Get("cmd")
	if cmd == "" {
		cmd = "/bin/bash"
	}
	if len(cmd) > maxPath || strings.ContainsFunc(cmd, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return apierr.Validation("cmd: not a program name")
	}
	args := q["arg"]
	if len(args) > 256 {
		return apierr.Validation("arg: at most 256 arguments")
	}
	for _, a := range args {
		if len(a) > 1<<16 || strings.ContainsRune(a, 0) {
			return apierr.Validation("arg: an argument is over 64 KiB or contains a NUL byte")
		}
	}
	user := q.Get("user")
	if err := checkUser("user", user); err != nil {
		return err
	}
	if err := checkUpgrade(r); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = r.PathValue("id")
	st.detail["cmd"] = truncate(cmd, 256)
	if user != "" {
		st.detail["user"] = user
	}
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Exec: govern.NewExec(append([]string{cmd}, args...), "", user, nil)}); err != nil {
		return err
	}

	// After the upgrade the request's context must not be used (the
	// connection is hijacked): the session has its own.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	defer s.mgr.Hold(st.target)() // an open terminal keeps the sandbox from idling
	sr := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: cmd, Args: args, Envs: map[string]string{"TERM": "xterm-256color"}},
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: uint32(cols), Rows: uint32(rows)}},
	}
	cs, err := agent.Process.Start(ctx, withUser(connect.NewRequest(sr), user))
	if err != nil {
		return err
	}
	defer cs.Close()
	ps := startStream(cs)
	pid, err := ps.first()
	if err != nil {
		return err
	}
	st.detail["pid"] = pid
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept wrote its own response; the terminal program is not wanted.
		agent.Signal(ctx, pid, syscall.SIGKILL)
		return fmt.Errorf("accept websocket: %w", err)
	}
	s.commitAudit(r, govern.AuditSuccess)
	conn.SetReadLimit(ptyMaxFrame)
	s.runPTY(ctx, conn, agent, pid, ps)
	return nil
}

// runPTY pumps a terminal session until the program exits. If the client
// leaves first, the program gets SIGHUP, then SIGKILL after ptyHangupGrace.
func (s *Server) runPTY(ctx context.Context, conn *websocket.Conn, agent *agentclient.Client, pid uint32, ps *procStream) {
	connCtx, connCancel := context.WithCancel(ctx)
	defer connCancel()
	exited := make(chan struct{})
	go func() {
		s.ptyInput(connCtx, conn, agent, pid)
		connCancel()
		select {
		case <-exited:
			return
		default:
		}
		// The client left while the program runs: hang up the terminal.
		agent.Signal(ctx, pid, syscall.SIGHUP)
		select {
		case <-exited:
		case <-time.After(ptyHangupGrace):
			agent.Signal(ctx, pid, syscall.SIGKILL)
		}
	}()

	// Output: agent -> client, until the end event.
	exitCode := int32(-1)
	ended := false
	for {
		ev, err := ps.next()
		if err != nil || ev == nil {
			break
		}
		if e := ev.GetEnd(); e != nil {
			exitCode, ended = e.GetExitCode(), true
			break
		}
		d := ev.GetData()
		if d == nil || connCtx.Err() != nil {
			continue // output nobody reads any more is dropped
		}
		var b []byte
		switch o := d.GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Pty:
			b = o.Pty
		case *processpb.ProcessEvent_DataEvent_Stdout:
			b = o.Stdout
		case *processpb.ProcessEvent_DataEvent_Stderr:
			b = o.Stderr
		}
		if len(b) > 0 && conn.Write(connCtx, websocket.MessageBinary, b) != nil {
			connCancel()
		}
	}
	close(exited)
	switch {
	case connCtx.Err() != nil:
		conn.CloseNow()
	case !ended:
		conn.Close(websocket.StatusInternalError, "sandbox agent stream failed")
	default:
		b, _ := json.Marshal(ptyExit{Type: "exit", ExitCode: exitCode})
		wctx, cancel := context.WithTimeout(connCtx, 5*time.Second)
		conn.Write(wctx, websocket.MessageText, b)
		cancel()
		conn.Close(websocket.StatusNormalClosure, "")
	}
}

// ptyInput pumps client frames to the program until the connection ends
// or ctx is done.
func (s *Server) ptyInput(ctx context.Context, conn *websocket.Conn, agent *agentclient.Client, pid uint32) {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if len(data) == 0 {
				continue
			}
			in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: data}}
			if _, err := agent.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: selector(pid), Input: in})); err != nil {
				if c := connect.CodeOf(err); c == connect.CodeFailedPrecondition || c == connect.CodeNotFound {
					continue // the program has exited; its end event follows
				}
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("pty input", "pid", pid, "err", err)
			}
		case websocket.MessageText:
			var rz ptyResize
			if json.Unmarshal(data, &rz) != nil || rz.Type != "resize" {
				continue // unknown control messages are ignored
			}
			if rz.Cols < 1 || rz.Rows < 1 || rz.Cols > 65535 || rz.Rows > 65535 {
				continue
			}
			size := &processpb.PTY{Size: &processpb.PTY_Size{Cols: uint32(rz.Cols), Rows: uint32(rz.Rows)}}
			agent.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: selector(pid), Pty: size}))
		}
	}
}
