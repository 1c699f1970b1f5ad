// Package process implements warden-agent's process.Process Connect service,
// wire-compatible with E2B's envd: start commands (pipes or a PTY) as a
// sandbox user, stream their output, send them input and signals, and
// reconnect to them later.
//
// Semantics worth knowing:
//
//   - A process is not tied to the stream that started it: a client that
//     disconnects leaves it running, and Connect (by pid or tag) attaches to
//     it again. With the Warden extension replay=true, Connect first sends
//     the output retained in the process's ring buffer (Config.OutputBuffer,
//     1 MiB by default, oldest output dropped first), then live output.
//   - If the Start request has a deadline (Connect-Timeout-Ms), the process
//     group is killed at that deadline whether or not the client is still
//     there, and a still-open Start stream ends with deadline_exceeded (envd
//     semantics). A deadline on Connect only ends that stream. There is no
//     other hidden deadline.
//   - Failing to start (unknown executable, missing cwd, unknown user) is a
//     Connect error returned before any event: not_found for an executable
//     that does not exist, invalid_argument for a bad request (unknown user,
//     missing cwd, empty command), permission_denied for one that may not be
//     executed. A stream that started always sends start first and exactly one
//     end last.
//   - The end event comes once the process has exited and its output pipes
//     are drained. Descendants that keep the pipes open after the process
//     exits (a shell's background job) are read only until their output has
//     been idle for 100 ms, for at most Config.DrainTimeout and 4 MiB; the
//     pipes are then closed.
//   - An exited process stays listed, signalable (its process group) and
//     connectable for Config.Retention (30 s by default), then is forgotten:
//     not_found.
//   - While a client reads slower than the process writes, the process is
//     slowed down (the stream falls at most about OutputBuffer behind), so a
//     connected stream never loses output.
//
// Reaping: exit statuses are collected by one central reaper per OS process
// (a goroutine woken by SIGCHLD that loops wait4(-1, WNOHANG)), which also
// reaps orphans reparented to the agent as PID 1. Nothing else in the same OS
// process may wait for its own children (os/exec's Cmd.Wait would race with
// it and fail with ECHILD).
package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
)

// Defaults.
const (
	DefaultPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	DefaultRetention    = 30 * time.Second
	DefaultOutputBuffer = 1 << 20
	DefaultDrainTimeout = 2 * time.Second
	DefaultKeepalive    = 90 * time.Second
	// KeepaliveHeader carries the keepalive interval of a stream in seconds.
	KeepaliveHeader = "Keepalive-Ping-Interval"
	// SnapshotHeader and DroppedHeader: see package agentcfg, which the
	// daemon imports without linking this package.
	SnapshotHeader = agentcfg.SnapshotHeader
	DroppedHeader  = agentcfg.DroppedHeader
	minKeepalive   = 100 * time.Millisecond
)

// Config configures the service.
type Config struct {
	DefaultUser    string                   // acting user without an Authorization header
	DefaultWorkdir string                   // cwd when the request has none; the user's home when empty
	Env            func() map[string]string // sandbox-wide environment, read at every start; may be nil
	Retention      time.Duration            // how long an exited process stays visible; 0: DefaultRetention
	OutputBuffer   int                      // output bytes retained per process for replay; 0: DefaultOutputBuffer
	DrainTimeout   time.Duration            // longest read of output after exit; 0: DefaultDrainTimeout
}

// Service is the process.Process service. Create it with New.
type Service struct {
	cfg    Config
	mu     sync.Mutex
	closed bool
	byPID  map[int]*proc
	byTag  map[string]*proc // live, retained, or being started (not yet registered)
}

var _ processpbconnect.ProcessHandler = (*Service)(nil)

// New creates the service and starts the process-wide reaper.
func New(cfg Config) *Service {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.OutputBuffer <= 0 {
		cfg.OutputBuffer = DefaultOutputBuffer
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	startReaper()
	return &Service{cfg: cfg, byPID: map[int]*proc{}, byTag: map[string]*proc{}}
}

// Close kills every process the service started (SIGKILL to each process
// group, retained exited ones included, for descendants they left behind),
// waits a little for their streams to end, and forgets them. Later starts
// fail with unavailable.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	procs := make([]*proc, 0, len(s.byPID))
	for _, p := range s.byPID {
		procs = append(procs, p)
		if p.retain != nil {
			p.retain.Stop()
		}
	}
	s.byPID, s.byTag = map[int]*proc{}, map[string]*proc{}
	s.mu.Unlock()
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
	}
	timeout := time.NewTimer(s.cfg.DrainTimeout + 2*time.Second)
	defer timeout.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-timeout.C:
			return
		}
	}
}

// Start starts a process and streams its events.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	if ctx.Err() != nil {
		return connect.NewError(ctxCode(ctx), fmt.Errorf("start: %w", ctx.Err()))
	}
	sp, err := s.prepare(req.Header(), req.Msg)
	if err != nil {
		return err
	}
	p := &proc{
		svc:    s,
		tag:    sp.tag,
		hasTag: sp.hasTag,
		user:   sp.user.Name,
		config: sp.config,
		out:    newOutput(int64(s.cfg.OutputBuffer)),
		done:   make(chan struct{}),
		exitCh: make(chan struct{}),
	}
	if err := s.reserve(p); err != nil {
		return err
	}
	c := p.out.subscribe(true) // before any output can arrive
	if err := p.spawn(sp); err != nil {
		s.unreserve(p)
		return err
	}
	if err := s.register(p); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		p.mu.Lock()
		if !p.exited {
			p.deadline = time.AfterFunc(time.Until(dl), p.killAtDeadline)
		}
		p.mu.Unlock()
	}
	return s.stream(ctx, req.Header(), p, c, true, nil, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// killAtDeadline kills the process group when the Start deadline passes.
func (p *proc) killAtDeadline() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.signal(syscall.SIGKILL)
	}
}

// Connect streams the events of a running or retained process.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	replay := req.Msg.GetReplay()
	c, dropped, stop := p.out.subscribeAt(replay)
	if replay {
		stream.ResponseHeader().Set(DroppedHeader, strconv.FormatInt(dropped, 10))
	}
	if !replay || req.Header().Get(SnapshotHeader) != "1" {
		stop = nil
	}
	return s.stream(ctx, req.Header(), p, c, false, stop, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// stream sends start, the output from cursor c on, keepalives, and the end
// event. A client that goes away only unsubscribes. At the request deadline
// the stream ends with deadline_exceeded, and the process is killed if this
// is the stream that started it (its timer does so too, even without a
// stream). With a stop (a snapshot), the stream ends cleanly, without an end
// event, once it has sent the output retained when it subscribed, unless the
// process had already finished by then.
func (s *Service) stream(ctx context.Context, h http.Header, p *proc, c *cursor, owner bool, stop *snapshot, send func(*pb.ProcessEvent) error) error {
	defer p.out.unsubscribe(c)
	interval := keepaliveInterval(h)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
		return err
	}
	ka := time.NewTimer(interval)
	defer ka.Stop()
	for {
		ch, ok, end, wake := p.out.next(c)
		if ok {
			if err := send(ch.event()); err != nil {
				return err
			}
			ka.Reset(interval)
			continue
		}
		if stop != nil && !stop.ended && c.next >= stop.next {
			return nil
		}
		if end != nil {
			e := &pb.ProcessEvent_EndEvent{ExitCode: end.ExitCode, Exited: end.Exited, Status: end.Status, Error: end.Error, Signal: end.Signal}
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: e}})
		}
		select {
		case <-wake:
		case <-ka.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			ka.Reset(interval)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				if owner {
					p.killAtDeadline()
					return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d killed: deadline exceeded", p.pid))
				}
				return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("stream of process %d: deadline exceeded", p.pid))
			}
			return connect.NewError(connect.CodeCanceled, fmt.Errorf("stream of process %d: %w", p.pid, ctx.Err()))
		}
	}
}

func keepaliveInterval(h http.Header) time.Duration {
	if v := h.Get(KeepaliveHeader); v != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 && f < 1e6 {
			return max(time.Duration(f*float64(time.Second)), minKeepalive)
		}
	}
	return DefaultKeepalive
}

// List lists the running processes and the retained exited ones.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.byPID))
	for _, p := range s.byPID {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return a.pid - b.pid })
	res := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		info := &pb.ProcessInfo{Config: p.config, Pid: uint32(p.pid), User: p.user, Exited: p.hasExited()}
		if p.hasTag {
			info.Tag = &p.tag
		}
		res.Processes = append(res.Processes, info)
	}
	return connect.NewResponse(res), nil
}

// SendInput writes to a process's stdin or PTY.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(ctx, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a client stream of input to one process: a start
// message naming the process, then data messages.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			q, err := s.lookup(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = q
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("stream input: data before start"))
			}
			if err := p.write(ctx, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

var signals = map[pb.Signal]syscall.Signal{
	pb.Signal_SIGNAL_SIGHUP:  syscall.SIGHUP,
	pb.Signal_SIGNAL_SIGINT:  syscall.SIGINT,
	pb.Signal_SIGNAL_SIGQUIT: syscall.SIGQUIT,
	pb.Signal_SIGNAL_SIGKILL: syscall.SIGKILL,
	pb.Signal_SIGNAL_SIGUSR1: syscall.SIGUSR1,
	pb.Signal_SIGNAL_SIGUSR2: syscall.SIGUSR2,
	pb.Signal_SIGNAL_SIGTERM: syscall.SIGTERM,
	pb.Signal_SIGNAL_SIGCONT: syscall.SIGCONT,
	pb.Signal_SIGNAL_SIGSTOP: syscall.SIGSTOP,
}

// SendSignal signals a process's whole process group. For an exited
// (retained) process it reaches the descendants left in the group, and is
// not_found when there are none.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	sig, ok := signals[req.Msg.GetSignal()]
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("signal process %d: it has exited: %w", p.pid, err))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// Update resizes a process's PTY.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.resize(size); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// prepare validates a start request: acting user, environment, cwd and
// executable.
func (s *Service) prepare(h http.Header, req *pb.StartRequest) (*spec, error) {
	pc := req.GetProcess()
	if pc.GetCmd() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("start: process.cmd is required"))
	}
	u, err := sysuser.FromRequest(h, s.cfg.DefaultUser)
	if err != nil {
		if errors.Is(err, sysuser.ErrUnknownUser) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start: %w", err))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start: %w", err))
	}
	env, pathEnv, err := s.environ(u, pc.GetEnvs())
	if err != nil {
		return nil, err
	}
	cwd, err := s.workdir(u, pc.Cwd)
	if err != nil {
		return nil, err
	}
	path, err := lookPath(pc.GetCmd(), pathEnv, cwd)
	if err != nil {
		code := connect.CodeInvalidArgument
		switch {
		case errors.Is(err, fs.ErrNotExist):
			code = connect.CodeNotFound
		case errors.Is(err, fs.ErrPermission):
			code = connect.CodePermissionDenied
		}
		return nil, connect.NewError(code, fmt.Errorf("start: %w", err))
	}
	sp := &spec{
		user:  u,
		path:  path,
		argv:  append([]string{pc.GetCmd()}, pc.GetArgs()...),
		env:   env,
		cwd:   cwd,
		stdin: req.Stdin == nil || *req.Stdin,
		config: &pb.ProcessConfig{
			Cmd:  pc.GetCmd(),
			Args: slices.Clone(pc.GetArgs()),
			Envs: pc.GetEnvs(),
			Cwd:  &cwd,
		},
	}
	if req.Pty != nil {
		sp.pty = &pb.PTY_Size{Cols: 80, Rows: 24}
		if sz := req.Pty.GetSize(); sz != nil && sz.Cols > 0 && sz.Rows > 0 {
			sp.pty = &pb.PTY_Size{Cols: sz.Cols, Rows: sz.Rows}
		}
	}
	if req.Tag != nil {
		sp.tag, sp.hasTag = *req.Tag, true
	}
	return sp, nil
}

// environ builds a process environment: PATH, HOME, USER, LOGNAME, SHELL of
// u, then the sandbox-wide environment, then the request's (which wins). The
// agent's own environment is never inherited.
func (s *Service) environ(u *sysuser.User, req map[string]string) ([]string, string, error) {
	m := map[string]string{
		"PATH":    DefaultPath,
		"HOME":    u.Home,
		"USER":    u.Name,
		"LOGNAME": u.Name,
	}
	if u.Shell != "" {
		m["SHELL"] = u.Shell
	}
	if s.cfg.Env != nil {
		for k, v := range s.cfg.Env() {
			m[k] = v
		}
	}
	for k, v := range req {
		m[k] = v
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start: invalid environment variable %q", k))
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, m["PATH"], nil
}

// workdir resolves the working directory. An explicit one must exist; the
// default (DefaultWorkdir, else home) falls back to the home directory, then
// to "/", when it does not.
func (s *Service) workdir(u *sysuser.User, cwd *string) (string, error) {
	if cwd != nil && *cwd != "" {
		dir := u.Resolve(*cwd, s.cfg.DefaultWorkdir)
		fi, err := os.Stat(dir)
		if err != nil {
			return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start: cwd %s: %w", dir, err))
		}
		if !fi.IsDir() {
			return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start: cwd %s: not a directory", dir))
		}
		return dir, nil
	}
	for _, dir := range []string{u.Resolve("", s.cfg.DefaultWorkdir), u.Resolve("~", ""), "/"} {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir, nil
		}
	}
	return "/", nil
}

// lookPath resolves cmd like execvp would in the process's environment: a
// name with a slash is taken as is (relative to cwd), any other is searched
// in pathEnv (relative entries are relative to cwd).
func lookPath(cmd, pathEnv, cwd string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("executable %q: %w", cmd, err)
		}
		return p, nil
	}
	var denied error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, cmd)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, fs.ErrPermission) && denied == nil {
			denied = fmt.Errorf("executable %q: %w", p, err)
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("executable %q not found in PATH %q: %w", cmd, pathEnv, fs.ErrNotExist)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("is a directory: %w", fs.ErrPermission)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("not executable: %w", fs.ErrPermission)
	}
	return nil
}

// reserve claims p's tag (tags are unique among processes that have not
// ended) before it is started.
func (s *Service) reserve(p *proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return connect.NewError(connect.CodeUnavailable, errors.New("start: process service is closed"))
	}
	if !p.hasTag {
		return nil
	}
	if q := s.byTag[p.tag]; q != nil && !q.isDone() {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("start: a process with tag %q is running", p.tag))
	}
	s.byTag[p.tag] = p
	return nil
}

func (s *Service) unreserve(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.hasTag && s.byTag[p.tag] == p {
		delete(s.byTag, p.tag)
	}
}

// register makes a started process visible to lookups.
func (s *Service) register(p *proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		p.signal(syscall.SIGKILL)
		return connect.NewError(connect.CodeUnavailable, errors.New("start: process service is closed"))
	}
	if old := s.byPID[p.pid]; old != nil { // a retained process whose pid was reused
		s.forgetLocked(old)
	}
	p.registered = true
	s.byPID[p.pid] = p
	if p.isDone() && p.retain == nil { // ended before it was registered
		p.retain = time.AfterFunc(s.cfg.Retention, func() { s.forget(p) })
	}
	return nil
}

// retire schedules an ended process to be forgotten after the retention time.
func (s *Service) retire(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !p.registered || p.retain != nil {
		return
	}
	p.retain = time.AfterFunc(s.cfg.Retention, func() { s.forget(p) })
}

func (s *Service) forget(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(p)
}

func (s *Service) forgetLocked(p *proc) {
	if p.retain != nil {
		p.retain.Stop()
	}
	if s.byPID[p.pid] == p {
		delete(s.byPID, p.pid)
	}
	if p.hasTag && s.byTag[p.tag] == p {
		delete(s.byTag, p.tag)
	}
}

// lookup finds a process by selector.
func (s *Service) lookup(sel *pb.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := s.byPID[int(v.Pid)]; p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *pb.ProcessSelector_Tag:
		if p := s.byTag[v.Tag]; p != nil && p.registered {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
}
