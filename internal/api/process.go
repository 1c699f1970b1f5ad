package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/agentclient"
	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// ndjson writes one JSON object per line and flushes each.
type ndjson struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	broken bool // a write failed: the client is gone
}

// startNDJSON sends the 200 header of a stream.
func startNDJSON(w http.ResponseWriter) *ndjson {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	n := &ndjson{w: w, rc: http.NewResponseController(w)}
	n.rc.Flush()
	return n
}

func (n *ndjson) send(v any) error {
	if n.broken {
		return errClientGone
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode stream event: %w", err)
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		n.broken = true
		return errClientGone
	}
	if err := n.rc.Flush(); err != nil {
		n.broken = true
		return errClientGone
	}
	return nil
}

// fail sends err as the stream's error event and returns err for the
// adapter to log and audit.
func (n *ndjson) fail(err error) error {
	e := apierr.From(err)
	n.send(streamError{Type: "error", Code: e.Code, Message: e.Message})
	return err
}

// errClientGone ends a stream whose client went away. It is not an error of
// the call: the adapter reports it at debug level.
var errClientGone = fmt.Errorf("client went away: %w", context.Canceled)

// Process stream events (ProcessEvent schema).
type (
	startEvent struct {
		Type string `json:"type"`
		PID  uint32 `json:"pid"`
	}
	dataEvent struct {
		Type string `json:"type"`
		Data []byte `json:"data"` // base64, standard alphabet, padded
	}
	endEvent struct {
		Type     string `json:"type"`
		ExitCode int32  `json:"exit_code"`
		Signal   int32  `json:"signal"`
		Status   string `json:"status"`
		Error    string `json:"error"`
	}
	streamError struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
)

// eventStream is a process event stream from the agent (Start or Connect).
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

// procStream reads the process events of a Start or Connect stream.
type procStream struct {
	s   eventStream
	msg func() *processpb.ProcessEvent
}

func startStream(s *connect.ServerStreamForClient[processpb.StartResponse]) *procStream {
	return &procStream{s: s, msg: func() *processpb.ProcessEvent { return s.Msg().GetEvent() }}
}

func connectStream(s *connect.ServerStreamForClient[processpb.ConnectResponse]) *procStream {
	return &procStream{s: s, msg: func() *processpb.ProcessEvent { return s.Msg().GetEvent() }}
}

// next returns the next event other than a keepalive, or (nil, err) at the
// end of the stream (err nil when the stream ended cleanly).
func (p *procStream) next() (*processpb.ProcessEvent, error) {
	for p.s.Receive() {
		ev := p.msg()
		if ev == nil || ev.GetKeepalive() != nil {
			continue
		}
		return ev, nil
	}
	return nil, p.s.Err()
}

// first waits for the start event. Errors the agent reports before starting
// (unknown executable, user or process) come back here, before any byte of
// the response is written.
func (p *procStream) first() (uint32, error) {
	ev, err := p.next()
	if err != nil {
		return 0, err
	}
	if ev == nil || ev.GetStart() == nil {
		return 0, errors.New("process stream did not begin with a start event")
	}
	return ev.GetStart().GetPid(), nil
}

// toEvent converts an agent event to the API's; nil for none.
func toEvent(ev *processpb.ProcessEvent) any {
	switch {
	case ev.GetStart() != nil:
		return startEvent{Type: "start", PID: ev.GetStart().GetPid()}
	case ev.GetData() != nil:
		switch d := ev.GetData().GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Stdout:
			return dataEvent{Type: "stdout", Data: nonNil(d.Stdout)}
		case *processpb.ProcessEvent_DataEvent_Stderr:
			return dataEvent{Type: "stderr", Data: nonNil(d.Stderr)}
		case *processpb.ProcessEvent_DataEvent_Pty:
			return dataEvent{Type: "pty", Data: nonNil(d.Pty)}
		}
	case ev.GetEnd() != nil:
		e := ev.GetEnd()
		return endEvent{Type: "end", ExitCode: e.GetExitCode(), Signal: e.GetSignal(), Status: e.GetStatus(), Error: e.GetError()}
	}
	return nil
}

// nonNil keeps an empty chunk encoded as "" rather than null.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// pump copies the events after start to out until the end event. It
// returns (true, nil) after the end event, (false, err) when the agent
// stream failed, and (false, errClientGone) when the client left.
func pump(p *procStream, out *ndjson) (ended bool, err error) {
	for {
		ev, err := p.next()
		if err != nil {
			return false, err
		}
		if ev == nil {
			return false, errors.New("process stream ended before the end event")
		}
		v := toEvent(ev)
		if v == nil || ev.GetStart() != nil {
			continue
		}
		if err := out.send(v); err != nil {
			return false, err
		}
		if ev.GetEnd() != nil {
			return true, nil
		}
	}
}

// execRequest is the ExecRequest schema.
type execRequest struct {
	Cmd            []string          `json:"cmd"`
	Command        *string           `json:"command"`
	Env            map[string]string `json:"env"`
	Cwd            string            `json:"cwd"`
	User           string            `json:"user"`
	Stdin          bool              `json:"stdin"`
	Tag            string            `json:"tag"`
	TimeoutSeconds int64             `json:"timeout_seconds"`
}

// argv returns the program and arguments to run.
func (q *execRequest) argv() ([]string, error) {
	switch {
	case q.Cmd != nil && q.Command != nil:
		return nil, apierr.Validation("give exactly one of cmd and command")
	case q.Cmd == nil && q.Command == nil:
		return nil, apierr.BadRequest("request body: one of cmd and command is required")
	case q.Command != nil:
		if *q.Command == "" {
			return nil, apierr.Validation("command: must not be empty")
		}
		if strings.ContainsRune(*q.Command, 0) {
			return nil, apierr.Validation("command: must not contain NUL")
		}
		return []string{"/bin/bash", "-lc", *q.Command}, nil
	}
	if len(q.Cmd) == 0 || q.Cmd[0] == "" {
		return nil, apierr.Validation("cmd: must name a program")
	}
	for _, a := range q.Cmd {
		if strings.ContainsRune(a, 0) {
			return nil, apierr.Validation("cmd: arguments must not contain NUL")
		}
	}
	return q.Cmd, nil
}

func (q *execRequest) validate() error {
	for k, v := range q.Env {
		if err := checkEnv(k, v); err != nil {
			return err
		}
	}
	if q.Cwd != "" {
		if err := checkPath("cwd", q.Cwd); err != nil {
			return apierr.Validation("%s", apierr.From(err).Message)
		}
	}
	if err := checkUser("user", q.User); err != nil {
		return err
	}
	if len(q.Tag) > 256 || strings.ContainsRune(q.Tag, 0) {
		return apierr.Validation("tag: at most 256 bytes without NUL")
	}
	if q.TimeoutSeconds < 0 || q.TimeoutSeconds > maxExecTimeout {
		return apierr.Validation("timeout_seconds: must be between 0 and %d", maxExecTimeout)
	}
	return nil
}

// auditArgv shortens an argv for the audit log: at most 16 arguments of at
// most 128 bytes each.
func auditArgv(argv []string) []string {
	out := make([]string, 0, min(len(argv), 17))
	for i, a := range argv {
		if i == 16 {
			out = append(out, fmt.Sprintf("... (%d more)", len(argv)-16))
			break
		}
		out = append(out, truncate(a, 128))
	}
	return out
}

// withUser sets the acting sandbox user of an agent request.
func withUser[T any](req *connect.Request[T], user string) *connect.Request[T] {
	if user != "" {
		req.Header().Set("Authorization", sysuser.BasicAuth(user))
	}
	return req
}

func selector(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

// agentFor checks access to the sandbox and returns its agent client; the
// sandbox must be running (409 otherwise).
func (s *Server) agentFor(r *http.Request) (*agentclient.Client, error) {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return s.mgr.AgentFor(sb)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var q execRequest
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	argv, err := q.argv()
	if err != nil {
		return err
	}
	if err := q.validate(); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = r.PathValue("id")
	st.detail["cmd"] = auditArgv(argv)
	if q.User != "" {
		st.detail["user"] = q.User
	}
	if q.Cwd != "" {
		st.detail["cwd"] = truncate(q.Cwd, 256)
	}
	if q.Tag != "" {
		st.detail["tag"] = truncate(q.Tag, 64)
	}
	if q.TimeoutSeconds > 0 {
		st.detail["timeout_seconds"] = q.TimeoutSeconds
	}
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ea := &govern.Action{Exec: govern.NewExec(argv, q.Cwd, q.User, envKeys(q.Env))}
	if len(q.Env) > 0 {
		ea.Payload = &govern.Payload{Env: q.Env} // the guard screens env values (never recorded)
	}
	if err := s.decide(r, ea); err != nil {
		return err
	}

	// The client's context bounds the stream, not the process: the agent
	// keeps a process whose stream went away running. A deadline becomes
	// the agent call's Connect-Timeout-Ms, at which the agent kills it.
	ctx := r.Context()
	var timeout time.Duration
	if q.TimeoutSeconds > 0 {
		timeout = time.Duration(q.TimeoutSeconds) * time.Second
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	pc := &processpb.ProcessConfig{Cmd: argv[0], Args: argv[1:], Envs: q.Env}
	if q.Cwd != "" {
		pc.Cwd = &q.Cwd
	}
	sr := &processpb.StartRequest{Process: pc, Stdin: &q.Stdin}
	if q.Tag != "" {
		sr.Tag = &q.Tag
	}
	cs, err := agent.Process.Start(ctx, withUser(connect.NewRequest(sr), q.User))
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
	out := startNDJSON(w)
	s.commitAudit(r, govern.AuditSuccess)
	if err := out.send(startEvent{Type: "start", PID: pid}); err != nil {
		return nil // the client left; the process keeps running
	}

	ended, err := pump(ps, out)
	switch {
	case ended:
		return nil
	case errors.Is(err, errClientGone) || r.Context().Err() != nil:
		return nil // the process keeps running
	case timeout > 0 && (errors.Is(ctx.Err(), context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded):
		// The agent's clock may reach the deadline just before ours.
		return s.finishTimedOut(r, agent, pid, timeout, out)
	}
	return out.fail(err)
}

// finishTimedOut ends the stream of a process the agent killed at its
// deadline: the Start stream ends without an end event, so the end event
// comes from a fresh Connect to the (retained) process, marked as a timeout.
func (s *Server) finishTimedOut(r *http.Request, agent *agentclient.Client, pid uint32, timeout time.Duration, out *ndjson) error {
	reason := fmt.Sprintf("killed: timeout of %s exceeded", timeout)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	cs, err := agent.Process.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: selector(pid)}))
	if err == nil {
		defer cs.Close()
		ps := connectStream(cs)
		for {
			ev, err := ps.next()
			if err != nil || ev == nil {
				break
			}
			if e := ev.GetEnd(); e != nil {
				msg := e.GetError()
				if msg == "" && e.GetSignal() != 0 {
					msg = reason
				}
				out.send(endEvent{Type: "end", ExitCode: e.GetExitCode(), Signal: e.GetSignal(), Status: e.GetStatus(), Error: msg})
				return nil
			}
			if v := toEvent(ev); v != nil && ev.GetStart() == nil {
				if out.send(v) != nil {
					return nil
				}
			}
		}
	}
	// The process is gone from the agent's table: report the kill.
	out.send(endEvent{Type: "end", ExitCode: -1, Signal: 9, Status: "signal: killed", Error: reason})
	return nil
}

// agentCallTimeout bounds one agent call that is neither a stream nor a
// transfer of arbitrary size; past it the call fails with 504 timeout.
const agentCallTimeout = 60 * time.Second

// callCtx returns the context of such a call.
func callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), agentCallTimeout)
}

func parsePID(r *http.Request) (uint32, error) {
	v := r.PathValue("pid")
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return 0, apierr.BadRequest("pid: %q is not a process ID", truncate(v, 32))
	}
	return uint32(n), nil
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := agent.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return err
	}
	type info struct {
		PID    uint32   `json:"pid"`
		Tag    string   `json:"tag"`
		Cmd    []string `json:"cmd"`
		User   string   `json:"user"`
		Exited bool     `json:"exited"`
	}
	out := struct {
		Processes []info `json:"processes"`
	}{Processes: []info{}}
	for _, p := range res.Msg.GetProcesses() {
		cmd := append([]string{p.GetConfig().GetCmd()}, p.GetConfig().GetArgs()...)
		out.Processes = append(out.Processes, info{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cmd, User: p.GetUser(), Exited: p.GetExited()})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) streamProcess(w http.ResponseWriter, r *http.Request) error {
	pid, err := parsePID(r)
	if err != nil {
		return err
	}
	replay, err := queryBool(r, "replay")
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["pid"] = pid
	st.detail["replay"] = replay
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	cs, err := agent.Process.Connect(r.Context(), connect.NewRequest(&processpb.ConnectRequest{Process: selector(pid), Replay: replay}))
	if err != nil {
		return err
	}
	defer cs.Close()
	ps := connectStream(cs)
	got, err := ps.first()
	if err != nil {
		return err
	}
	out := startNDJSON(w)
	s.commitAudit(r, govern.AuditSuccess)
	if err := out.send(startEvent{Type: "start", PID: got}); err != nil {
		return nil
	}
	ended, err := pump(ps, out)
	if ended || errors.Is(err, errClientGone) || r.Context().Err() != nil {
		return nil
	}
	return out.fail(err)
}

func (s *Server) sendStdin(w http.ResponseWriter, r *http.Request) error {
	pid, err := parsePID(r)
	if err != nil {
		return err
	}
	stateOf(r).detail["pid"] = pid
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxStdinBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierr.PayloadTooLarge("request body too large: stdin takes at most 1 MiB per request")
		}
		return apierr.Wrap(apierr.CodeBadRequest, "read request body", err)
	}
	stateOf(r).detail["bytes"] = len(data)
	ctx, cancel := callCtx(r)
	defer cancel()
	if len(data) > 0 {
		in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: data}}
		if _, err := agent.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: selector(pid), Input: in})); err != nil {
			return err
		}
	} else if err := s.processExists(ctx, agent, pid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// processExists returns not_found unless the agent knows pid.
func (s *Server) processExists(ctx context.Context, agent *agentclient.Client, pid uint32) error {
	res, err := agent.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return err
	}
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return nil
		}
	}
	return notFoundf("process with pid %d not found", pid)
}

func (s *Server) closeStdin(w http.ResponseWriter, r *http.Request) error {
	pid, err := parsePID(r)
	if err != nil {
		return err
	}
	stateOf(r).detail["pid"] = pid
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	if _, err := agent.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: selector(pid)})); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

var signalNumbers = map[string]processpb.Signal{
	"SIGHUP":  processpb.Signal_SIGNAL_SIGHUP,
	"SIGINT":  processpb.Signal_SIGNAL_SIGINT,
	"SIGQUIT": processpb.Signal_SIGNAL_SIGQUIT,
	"SIGKILL": processpb.Signal_SIGNAL_SIGKILL,
	"SIGUSR1": processpb.Signal_SIGNAL_SIGUSR1,
	"SIGUSR2": processpb.Signal_SIGNAL_SIGUSR2,
	"SIGTERM": processpb.Signal_SIGNAL_SIGTERM,
	"SIGCONT": processpb.Signal_SIGNAL_SIGCONT,
	"SIGSTOP": processpb.Signal_SIGNAL_SIGSTOP,
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) error {
	pid, err := parsePID(r)
	if err != nil {
		return err
	}
	var q struct {
		Signal *string `json:"signal"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Signal == nil {
		return apierr.BadRequest("request body: signal is required")
	}
	sig, ok := signalNumbers[*q.Signal]
	if !ok {
		return apierr.Validation("signal: %q is not one of SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGTERM, SIGCONT, SIGSTOP", truncate(*q.Signal, 32))
	}
	st := stateOf(r)
	st.detail["pid"] = pid
	st.detail["signal"] = *q.Signal
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	if _, err := agent.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: selector(pid), Signal: sig})); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
