// Package fake is a backend for tests: it runs the real in-sandbox agent
// (internal/agent, the code of warden-agent) as an unprivileged child
// process of the test, serving on a unix socket that DialAgent dials, so
// exec and files go through the same agent protocol as on every other
// backend. It needs no root, no namespaces and no cgroups, and it starts a
// sandbox in milliseconds, like Nomad's mock driver for its tests.
//
// The fake does not isolate anything (Capabilities.Isolation is "none").
// Sandbox processes run on the host as the user running the test, or, when
// that is root, as nobody (uid and gid 65534), so that a sandbox never acts
// as the host's root; the state dir must then be reachable by nobody. Each
// sandbox has a directory of its own, <StateDir>/<id>, whose root/ holds the
// homes of the sandbox users ("user" and "root", both mapped to the calling
// uid and gid, so no user switch happens) and a tmp/ that processes find in
// TMPDIR; an absolute path such as /tmp/x is the host's, and Landlock (where
// the kernel has it) refuses writes outside the sandbox directory, so that a
// test meant for a real sandbox fails instead of writing the host's /tmp or
// /home. The spec's layers,
// limits, uppers, root capabilities and network are not honoured (limits
// only validated). What the fake does honour:
//
//   - the state machine of internal/backend: Create, Start, Stop, Kill, Wait,
//     Status, Delete (idempotent, leaves nothing behind);
//   - Recover: a new instance with the same StateDir re-attaches to a
//     sandbox whose agent still runs, or frees it and returns ErrLost;
//   - Pause and Resume: SIGSTOP and SIGCONT of the agent and every process
//     under it (the agent is a child subreaper, so daemonised processes stay
//     under it), with DialAgent refused while paused;
//   - Usage from /proc: CPU time, resident memory and the number of
//     processes; what it cannot observe is -1.
//
// The agent runs as a re-execution of the test binary itself
// (/proc/self/exe): this package's init serves the agent when the
// environment names a sandbox directory. Only tests import this package; it
// is not registered with the backend registry, so wardend cannot select it.
package fake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/backend"
)

// ID is the backend's name in handles.
const ID = "fake"

// Config configures a fake backend.
type Config struct {
	// StateDir holds one directory per sandbox. A second backend with the
	// same StateDir stands in for a restarted daemon (Recover).
	StateDir string
	// AgentLog, if set, receives the agents' stderr (default: each
	// sandbox's agent.log).
	AgentLog string
}

// Backend is the fake backend.
type Backend struct {
	cfg Config

	uid, gid int // the identity sandbox processes run as

	binOnce sync.Once
	bin     string // the agent's executable
	binErr  error

	mu  sync.Mutex
	sbs map[string]*sandbox // by id: sandboxes this instance created or recovered
}

// nobody is the identity of sandbox processes when the test runs as root.
const nobody = 65534

// sandbox is what this instance knows of a sandbox.
type sandbox struct {
	dir  string
	done chan struct{} // closed once the agent has exited; nil before Start
	exit backend.ExitStatus
}

// state is the sandbox's state file, shared by instances.
type state struct {
	ID     string              `json:"id"`
	Pid    int                 `json:"pid,omitempty"`   // the agent, once started
	Start  uint64              `json:"start,omitempty"` // its start time in clock ticks (/proc/pid/stat), against pid reuse
	Paused bool                `json:"paused,omitempty"`
	Kept   bool                `json:"kept,omitempty"` // stopped by StopKeep (coldrestart.go)
	Exit   *backend.ExitStatus `json:"exit,omitempty"` // set once the agent has exited
}

// agentFile is the agent's configuration in the sandbox directory.
type agentFile struct {
	Socket string       `json:"socket"`
	Agent  agent.Config `json:"agent"`
}

// New returns a fake backend keeping its sandboxes under cfg.StateDir.
func New(cfg Config) (*Backend, error) {
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("fake backend: state dir %q is not an absolute path", cfg.StateDir)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("fake backend: %w", err)
	}
	b := &Backend{cfg: cfg, sbs: map[string]*sandbox{}, uid: os.Geteuid(), gid: os.Getegid()}
	if b.uid == 0 {
		b.uid, b.gid = nobody, nobody
		// nobody reaches its sandbox directories through it (and its
		// parents must let it, as a temporary directory made 0755 does).
		if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
			return nil, fmt.Errorf("fake backend: %w", err)
		}
	}
	return b, nil
}

// ID returns "fake".
func (b *Backend) ID() string { return ID }

// Capabilities declares what the fake does: pause, and nothing of isolation.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: "none", Pause: true, ColdRestart: true}
}

// Dir returns the host directory of sandbox id; its root/ holds the
// sandbox users' homes and tmp/.
func (b *Backend) Dir(id string) string { return filepath.Join(b.cfg.StateDir, id) }

func (b *Backend) handle(id string) backend.Handle {
	return backend.Handle{Version: backend.HandleVersion, Backend: ID, ID: id}
}

// Create makes the sandbox's directory, its users and its agent
// configuration. Nothing runs yet.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Handle, error) {
	if err := spec.Validate(); err != nil {
		return backend.Handle{}, err
	}
	if len(spec.Volumes) > 0 {
		return backend.Handle{}, fmt.Errorf("%w: the fake backend cannot mount volumes", backend.ErrUnsupported)
	}
	dir := b.Dir(spec.ID)
	// A unix socket path holds at most 107 bytes.
	if sock := filepath.Join(dir, "agent.sock"); len(sock) > 107 {
		return backend.Handle{}, fmt.Errorf("create %s: agent socket path %s is too long: use a shorter state dir", spec.ID, sock)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return backend.Handle{}, fmt.Errorf("create %s: %w: a sandbox with this id exists", spec.ID, backend.ErrInvalidSpec)
		}
		return backend.Handle{}, fmt.Errorf("create %s: %w", spec.ID, err)
	}
	if err := b.prepare(dir, spec); err != nil {
		os.RemoveAll(dir)
		return backend.Handle{}, fmt.Errorf("create %s: %w", spec.ID, err)
	}
	b.mu.Lock()
	b.sbs[spec.ID] = &sandbox{dir: dir}
	b.mu.Unlock()
	return b.handle(spec.ID), nil
}

// prepare writes the sandbox directory: root/ with the users' homes and tmp,
// passwd and group mapping every user to the caller, the agent's config and
// the state file.
func (b *Backend) prepare(dir string, spec backend.Spec) error {
	root := filepath.Join(dir, "root")
	user := spec.User
	if user == "" {
		user = "user"
	}
	uid, gid := b.uid, b.gid
	var passwd strings.Builder
	homes := map[string]string{"root": "/root", "user": "/home/user"}
	names := []string{"root", "user"}
	if _, ok := homes[user]; !ok {
		if strings.ContainsAny(user, ":\n/") {
			return fmt.Errorf("%w: user %q", backend.ErrInvalidSpec, user)
		}
		homes[user] = "/home/" + user
		names = append(names, user)
	}
	for _, n := range names {
		h := filepath.Join(root, homes[n])
		if err := os.MkdirAll(h, 0o700); err != nil {
			return err
		}
		fmt.Fprintf(&passwd, "%s:x:%d:%d:%s:%s:/bin/sh\n", n, uid, gid, n, h)
	}
	tmp := filepath.Join(root, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	workdir := ""
	if spec.Workdir != "" {
		workdir = filepath.Join(root, filepath.Clean("/"+spec.Workdir))
		if err := os.MkdirAll(workdir, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd.String()), 0o600); err != nil {
		return err
	}
	group := fmt.Sprintf("root:x:%d:\nuser:x:%d:\n", gid, gid)
	if err := os.WriteFile(filepath.Join(dir, "group"), []byte(group), 0o600); err != nil {
		return err
	}
	env := map[string]string{"TMPDIR": tmp}
	for k, v := range spec.Env {
		env[k] = v
	}
	af := agentFile{
		Socket: filepath.Join(dir, "agent.sock"),
		Agent:  agent.Config{DefaultUser: user, DefaultWorkdir: workdir, Env: env, DiskBytes: spec.Limits.DiskBytes},
	}
	if err := writeJSON(filepath.Join(dir, "agent.json"), af); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "state.json"), state{ID: spec.ID}); err != nil {
		return err
	}
	if os.Geteuid() == 0 { // the agent runs as nobody: hand it the directory
		return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		})
	}
	return nil
}

// agentBinary returns the executable to run agents from: this test binary,
// or when root a copy that nobody can run (go test builds in a private
// directory).
func (b *Backend) agentBinary() (string, error) {
	b.binOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			b.binErr = fmt.Errorf("find the test binary: %w", err)
			return
		}
		if os.Geteuid() != 0 {
			b.bin = self
			return
		}
		b.bin = filepath.Join(b.cfg.StateDir, fmt.Sprintf("agent-%d", time.Now().UnixNano()))
		if b.binErr = copyFile(self, b.bin, 0o755); b.binErr != nil {
			b.binErr = fmt.Errorf("copy the test binary for the agent: %w", b.binErr)
		}
	})
	return b.bin, b.binErr
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

// lookup returns this instance's record of h, or ErrNotFound.
func (b *Backend) lookup(h backend.Handle) (*sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.sbs[h.ID]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", h.ID, backend.ErrNotFound)
	}
	return sb, nil
}

// Start runs the agent and returns once it accepts connections.
func (b *Backend) Start(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	sb, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	b.mu.Lock()
	started := sb.done != nil
	if !started {
		sb.done = make(chan struct{})
	}
	b.mu.Unlock()
	if started {
		return h, fmt.Errorf("start %s: %w", h.ID, backend.ErrAlreadyStart)
	}
	var af agentFile
	if err := readJSON(filepath.Join(sb.dir, "agent.json"), &af); err != nil {
		return h, fmt.Errorf("start %s: %w", h.ID, err)
	}
	self, err := b.agentBinary()
	if err != nil {
		return h, fmt.Errorf("start %s: %w", h.ID, err)
	}
	logPath := b.cfg.AgentLog
	if logPath == "" {
		logPath = filepath.Join(sb.dir, "agent.log")
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return h, fmt.Errorf("start %s: %w", h.ID, err)
	}
	defer logf.Close()
	cmd := exec.Command(self)
	cmd.Dir = filepath.Join(sb.dir, "root")
	cmd.Env = []string{agentEnv + "=" + sb.dir, "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, out of the test's terminal signals; SIGTERM
	// (the agent ends its processes) if the test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), Groups: []uint32{}}
	}
	if err := cmd.Start(); err != nil {
		return h, fmt.Errorf("start %s: run agent: %w", h.ID, err)
	}
	pid := cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		es := backend.ExitStatus{}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ws := ee.Sys().(syscall.WaitStatus)
			es.Code = ws.ExitStatus()
			if ws.Signaled() {
				es.Signal = int(ws.Signal())
				es.Code = 128 + es.Signal
			}
		}
		b.exited(sb, es)
	}()
	start, _ := startTime(pid)
	if err := updateState(sb.dir, func(st *state) { st.Pid, st.Start = pid, start }); err != nil {
		killTree(pid)
		return h, fmt.Errorf("start %s: %w", h.ID, err)
	}
	if err := waitSocket(ctx, af.Socket, sb.done); err != nil {
		killTree(pid)
		return h, fmt.Errorf("start %s: agent: %w (log %s)", h.ID, err, logPath)
	}
	return h, nil
}

// exited records the agent's end.
func (b *Backend) exited(sb *sandbox, es backend.ExitStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-sb.done:
		return
	default:
	}
	updateState(sb.dir, func(st *state) {
		if st.Exit == nil {
			st.Exit, st.Paused = &es, false
		}
	})
	sb.exit = es
	close(sb.done)
}

// waitSocket waits until the agent accepts connections on path, or it exits.
func waitSocket(ctx context.Context, path string, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return errors.New("exited before serving")
		case <-ctx.Done():
			return fmt.Errorf("not serving: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// running returns the live agent's pid, or an error wrapping ErrNotRunning.
func (b *Backend) running(h backend.Handle) (*sandbox, state, error) {
	sb, err := b.lookup(h)
	if err != nil {
		return nil, state{}, err
	}
	st, err := readState(sb.dir)
	if err != nil {
		return nil, state{}, err
	}
	if st.Pid == 0 || st.Exit != nil || !alive(st.Pid, st.Start) {
		return sb, st, fmt.Errorf("sandbox %s: %w", h.ID, backend.ErrNotRunning)
	}
	return sb, st, nil
}

// Stop sends SIGTERM to every process of the sandbox but the agent, waits
// up to grace for them to end, then kills everything.
func (b *Backend) Stop(ctx context.Context, h backend.Handle, grace time.Duration) error {
	_, st, err := b.running(h)
	if err != nil {
		if errors.Is(err, backend.ErrNotRunning) {
			return nil
		}
		return err
	}
	b.signalTree(st.Pid, syscall.SIGCONT, false)
	b.signalTree(st.Pid, syscall.SIGTERM, false)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(descendants(st.Pid)) > 0 {
		select {
		case <-ctx.Done():
			deadline = time.Now()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return b.Kill(ctx, h)
}

// Kill freezes every process of the sandbox, kills them all and waits for
// the agent to be gone.
func (b *Backend) Kill(ctx context.Context, h backend.Handle) error {
	sb, st, err := b.running(h)
	if err != nil {
		if errors.Is(err, backend.ErrNotRunning) {
			return nil
		}
		return err
	}
	killTree(st.Pid)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.wait(wctx, sb, st); err != nil {
		return fmt.Errorf("kill %s: %w", h.ID, err)
	}
	return nil
}

// Wait blocks until the agent has exited.
func (b *Backend) Wait(ctx context.Context, h backend.Handle) (backend.ExitStatus, error) {
	sb, err := b.lookup(h)
	if err != nil {
		return backend.ExitStatus{}, err
	}
	st, err := readState(sb.dir)
	if err != nil {
		return backend.ExitStatus{}, err
	}
	if st.Pid == 0 {
		return backend.ExitStatus{}, fmt.Errorf("wait %s: %w", h.ID, backend.ErrNotRunning)
	}
	return b.wait(ctx, sb, st)
}

func (b *Backend) wait(ctx context.Context, sb *sandbox, st state) (backend.ExitStatus, error) {
	b.mu.Lock()
	done := sb.done
	b.mu.Unlock()
	if done != nil { // this instance started it and reaps it
		select {
		case <-done:
			b.mu.Lock()
			defer b.mu.Unlock()
			return sb.exit, nil
		case <-ctx.Done():
			return backend.ExitStatus{}, ctx.Err()
		}
	}
	// Recovered: another instance (or a dead daemon) is its parent; poll.
	for {
		if cur, err := readState(sb.dir); err == nil && cur.Exit != nil {
			return *cur.Exit, nil
		}
		if !alive(st.Pid, st.Start) {
			return backend.ExitStatus{Code: -1, Reason: "exited while no backend watched it"}, nil
		}
		select {
		case <-ctx.Done():
			return backend.ExitStatus{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Status reports created, running, paused or stopped.
func (b *Backend) Status(ctx context.Context, h backend.Handle) (backend.State, error) {
	sb, err := b.lookup(h)
	if err != nil {
		return "", err
	}
	st, err := readState(sb.dir)
	if err != nil {
		return "", err
	}
	switch {
	case st.Kept:
		return backend.StateStopped, nil
	case st.Pid == 0:
		return backend.StateCreated, nil
	case st.Exit != nil || !alive(st.Pid, st.Start):
		return backend.StateStopped, nil
	case st.Paused:
		return backend.StatePaused, nil
	}
	return backend.StateRunning, nil
}

// Usage reads /proc for the agent and every process under it.
func (b *Backend) Usage(ctx context.Context, h backend.Handle) (backend.Usage, error) {
	u := backend.Usage{MemoryPeak: -1, DiskBytes: -1, OOMEvents: -1}
	_, st, err := b.running(h)
	if err != nil {
		if errors.Is(err, backend.ErrNotRunning) {
			return u, nil
		}
		return u, err
	}
	page := int64(os.Getpagesize())
	for i, pid := range append([]int{st.Pid}, descendants(st.Pid)...) {
		ps, err := readStat(pid)
		if err != nil {
			continue
		}
		u.CPUNanos += int64(ps.utime+ps.stime) * int64(time.Second) / clockTicks
		if i == 0 { // what the agent's exited children used
			u.CPUNanos += int64(ps.cutime+ps.cstime) * int64(time.Second) / clockTicks
		}
		u.MemoryBytes += ps.rss * page
		u.Pids++
	}
	return u, nil
}

// DialAgent connects to the agent's unix socket.
func (b *Backend) DialAgent(ctx context.Context, h backend.Handle) (net.Conn, error) {
	sb, st, err := b.running(h)
	if err != nil {
		return nil, err
	}
	if st.Paused {
		return nil, fmt.Errorf("dial agent of %s: paused: %w", h.ID, backend.ErrNotRunning)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(sb.dir, "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("dial agent of %s: %w", h.ID, err)
	}
	return c, nil
}

// Recover re-attaches to a sandbox whose agent still runs, or frees it and
// returns ErrLost.
func (b *Backend) Recover(ctx context.Context, h backend.Handle) error {
	dir := b.Dir(h.ID)
	st, err := readState(dir)
	if err == nil && (st.Kept || st.Pid != 0 && st.Exit == nil && alive(st.Pid, st.Start)) {
		b.mu.Lock()
		if _, ok := b.sbs[h.ID]; !ok {
			b.sbs[h.ID] = &sandbox{dir: dir}
		}
		b.mu.Unlock()
		return nil
	}
	if rerr := os.RemoveAll(dir); rerr != nil {
		return fmt.Errorf("recover %s: %w (free: %w)", h.ID, backend.ErrLost, rerr)
	}
	b.mu.Lock()
	delete(b.sbs, h.ID)
	b.mu.Unlock()
	return fmt.Errorf("recover %s: %w", h.ID, backend.ErrLost)
}

// Delete kills the sandbox if it runs and removes its directory.
func (b *Backend) Delete(ctx context.Context, h backend.Handle) error {
	dir := b.Dir(h.ID)
	if st, err := readState(dir); err == nil && st.Pid != 0 && st.Exit == nil && alive(st.Pid, st.Start) {
		killTree(st.Pid)
		b.mu.Lock()
		sb := b.sbs[h.ID]
		b.mu.Unlock()
		if sb == nil { // started by another instance: poll for its end
			sb = &sandbox{dir: dir}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := b.wait(wctx, sb, st)
		cancel()
		if err != nil {
			return fmt.Errorf("delete %s: %w", h.ID, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete %s: %w", h.ID, err)
	}
	b.mu.Lock()
	delete(b.sbs, h.ID)
	b.mu.Unlock()
	return nil
}

// Pause stops the agent and every process under it with SIGSTOP.
func (b *Backend) Pause(ctx context.Context, h backend.Handle) error {
	sb, st, err := b.running(h)
	if err != nil {
		return err
	}
	if err := updateState(sb.dir, func(st *state) { st.Paused = true }); err != nil {
		return fmt.Errorf("pause %s: %w", h.ID, err)
	}
	freeze(st.Pid)
	return nil
}

// Resume continues what Pause stopped.
func (b *Backend) Resume(ctx context.Context, h backend.Handle) error {
	sb, st, err := b.running(h)
	if err != nil {
		return err
	}
	thaw(st.Pid)
	if err := updateState(sb.dir, func(st *state) { st.Paused = false }); err != nil {
		return fmt.Errorf("resume %s: %w", h.ID, err)
	}
	return nil
}

// Leftovers lists what is left on the host of sandbox id: its directory
// and a live agent.
func (b *Backend) Leftovers(id string) []string {
	var left []string
	dir := b.Dir(id)
	if st, err := readState(dir); err == nil && st.Pid != 0 && alive(st.Pid, st.Start) {
		left = append(left, fmt.Sprintf("agent process %d", st.Pid))
	}
	if _, err := os.Lstat(dir); err == nil {
		left = append(left, dir)
	}
	return left
}

// signalTree sends sig to the processes under pid, and to pid itself if
// self.
func (b *Backend) signalTree(pid int, sig syscall.Signal, self bool) {
	if self {
		syscall.Kill(pid, sig)
	}
	for _, p := range descendants(pid) {
		syscall.Kill(p, sig)
	}
}

// freeze stops pid and every process under it, until a pass finds them all
// stopped (a stopped process cannot fork, so the set converges).
func freeze(pid int) {
	for range 50 {
		all := append([]int{pid}, descendants(pid)...)
		stopped := true
		for _, p := range all {
			if ps, err := readStat(p); err == nil && ps.state != 'T' && ps.state != 't' && ps.state != 'Z' && ps.state != 'X' {
				stopped = false
				syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if stopped {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// thaw continues pid and every process under it, until a pass finds none
// stopped.
func thaw(pid int) {
	for range 50 {
		stopped := false
		for _, p := range append([]int{pid}, descendants(pid)...) {
			if ps, err := readStat(p); err == nil && (ps.state == 'T' || ps.state == 't') {
				stopped = true
				syscall.Kill(p, syscall.SIGCONT)
			}
		}
		if !stopped {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killTree freezes pid and everything under it, then kills them all: frozen
// first, so nothing forks away meanwhile, and found while the agent (their
// subreaper) still holds them.
func killTree(pid int) {
	freeze(pid)
	for _, p := range descendants(pid) {
		syscall.Kill(p, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// procStat is what the fake reads of /proc/<pid>/stat.
type procStat struct {
	state                        byte
	ppid                         int
	utime, stime, cutime, cstime uint64
	start                        uint64
	rss                          int64
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces and parentheses: fields follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	n := func(k int) uint64 { v, _ := strconv.ParseUint(f[k-3], 10, 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	rss, _ := strconv.ParseInt(f[24-3], 10, 64)
	return procStat{state: f[0][0], ppid: ppid, utime: n(14), stime: n(15), cutime: n(16), cstime: n(17), start: n(22), rss: rss}, nil
}

func startTime(pid int) (uint64, error) {
	ps, err := readStat(pid)
	return ps.start, err
}

// alive reports whether pid runs and is the process started at start (not a
// zombie, not another process that reuses the pid).
func alive(pid int, start uint64) bool {
	ps, err := readStat(pid)
	return err == nil && ps.start == start && ps.state != 'Z' && ps.state != 'X'
}

// descendants lists the processes under pid, children before grandchildren.
func descendants(pid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if ps, err := readStat(p); err == nil {
			children[ps.ppid] = append(children[ps.ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// stateMu serialises updates of state files, across instances in a process.
var stateMu sync.Mutex

// updateState changes the state file of dir with fn.
func updateState(dir string, fn func(*state)) error {
	stateMu.Lock()
	defer stateMu.Unlock()
	st, err := readState(dir)
	if err != nil {
		return err
	}
	fn(&st)
	return writeJSON(filepath.Join(dir, "state.json"), st)
}

func readState(dir string) (state, error) {
	var st state
	if err := readJSON(filepath.Join(dir, "state.json"), &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return st, fmt.Errorf("sandbox %s: %w", filepath.Base(dir), backend.ErrNotFound)
		}
		return st, err
	}
	return st, nil
}

func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := json.NewDecoder(bufio.NewReader(f)).Decode(v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// writeJSON replaces path atomically.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
