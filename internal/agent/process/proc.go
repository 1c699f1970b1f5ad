package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
)

const (
	// readSize is the largest chunk read from a pipe or PTY at once.
	readSize = 32 << 10
	// drainIdle: once the process has exited, output still held open by its
	// descendants is read until nothing arrives for this long.
	drainIdle = 100 * time.Millisecond
	// drainBytes caps what is read after the process has exited (a chatty
	// background child must not keep the end event away forever).
	drainBytes = 4 << 20
)

// spec is a validated start request.
type spec struct {
	user   *sysuser.User
	path   string // resolved executable
	argv   []string
	env    []string
	cwd    string
	pty    *pb.PTY_Size // nil: pipes
	stdin  bool
	config *pb.ProcessConfig // as reported by List
	tag    string
	hasTag bool
}

type reader struct {
	f    *os.File
	kind dataKind
}

// proc is one process started by the service.
type proc struct {
	svc    *Service
	pid    int // set before registration, then read-only
	tag    string
	hasTag bool
	user   string
	config *pb.ProcessConfig
	out    *output
	done   chan struct{} // closed once the end event is published
	exitCh chan struct{} // closed once the exit status is in (onExit)

	inMu  sync.Mutex // serializes input writes (held while one blocks)
	fmu   sync.Mutex // guards stdin; never held while blocking
	stdin *os.File   // write end of the stdin pipe; nil without one or once closed
	pty   *os.File   // PTY master (pollable); nil without a PTY; closed by its reader

	mu         sync.Mutex
	readers    []reader
	pending    int // readers still reading + 1 until the exit status arrives
	exited     bool
	exitedAt   time.Time
	status     syscall.WaitStatus
	deadline   *time.Timer // kills the process at the Start request's deadline
	retain     *time.Timer // forgets the process after the retention time
	registered bool        // guarded by svc.mu: visible to lookups
}

// spawn creates the process's pipes or PTY and forks it. On error nothing is
// left open and the error is a *connect.Error.
func (p *proc) spawn(sp *spec) (err error) {
	var child []*os.File // the child's ends, closed in the parent once forked
	var mine []*os.File  // our ends, closed on failure
	defer func() {
		for _, f := range child {
			f.Close()
		}
		if err != nil {
			for _, f := range mine {
				f.Close()
			}
			p.stdin, p.pty, p.readers = nil, nil, nil
		}
	}()
	files := make([]uintptr, 3)
	sys := &syscall.SysProcAttr{Setsid: true}
	if sp.pty != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("open pty: %w", err))
		}
		child = append(child, tty)
		m, err := pollable(master)
		master.Close()
		if err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("open pty: %w", err))
		}
		mine = append(mine, m)
		if err := setWinsize(m, sp.pty); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("set pty size: %w", err))
		}
		p.pty = m
		p.readers = []reader{{m, kindPTY}}
		fd := tty.Fd()
		files[0], files[1], files[2] = fd, fd, fd
		sys.Setctty = true
		sys.Ctty = 0 // the child's stdin, once the tty is in place
	} else {
		if sp.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("stdin pipe: %w", err))
			}
			child, mine = append(child, r), append(mine, w)
			p.stdin = w
			files[0] = r.Fd()
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("open %s: %w", os.DevNull, err))
			}
			child = append(child, null)
			files[0] = null.Fd()
		}
		for i, kind := range []dataKind{kindStdout, kindStderr} {
			r, w, err := os.Pipe()
			if err != nil {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("output pipe: %w", err))
			}
			child, mine = append(child, w), append(mine, r)
			p.readers = append(p.readers, reader{r, kind})
			files[1+i] = w.Fd()
		}
	}
	if cred := credential(sp.user); cred != nil {
		sys.Credential = cred
	}
	p.pending = len(p.readers) + 1
	attr := &syscall.ProcAttr{Dir: sp.cwd, Env: sp.env, Files: files, Sys: sys}
	pid, err := forkExec(sp.path, sp.argv, attr, p.onExit)
	runtime.KeepAlive(child)
	if err != nil {
		return startError(sp, err)
	}
	p.pid = pid
	for _, r := range p.readers {
		go p.read(r)
	}
	return nil
}

// credential is the identity to run as, or nil to keep the agent's (an
// unprivileged agent starting a process as itself cannot call setgroups).
func credential(u *sysuser.User) *syscall.Credential {
	euid := os.Geteuid()
	if euid != 0 && int(u.UID) == euid && int(u.GID) == os.Getegid() {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// startError maps a fork/exec failure to a Connect error.
func startError(sp *spec, err error) error {
	err = fmt.Errorf("start %q as %s in %s: %w", sp.argv[0], sp.user.Name, sp.cwd, err)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.E2BIG), errors.Is(err, syscall.EINVAL):
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// pollable returns a non-blocking duplicate of f registered with the runtime
// poller, so reads honour deadlines (creack/pty leaves the master blocking).
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("set nonblock: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func setWinsize(f *os.File, size *pb.PTY_Size) error {
	rows, cols := uint16(size.GetRows()), uint16(size.GetCols())
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}

// read copies one output stream into the log until EOF (or, for a PTY, EIO
// once every slave is closed). After the process has exited it stops at the
// drain limits, so descendants that keep the pipe open (a shell's background
// job) cannot hold back the end event.
func (p *proc) read(r reader) {
	defer p.doneOne()
	defer func() {
		if r.kind == kindPTY {
			// Closing the master hangs up the terminal: the kernel sends
			// SIGHUP to the session leader. The master reads EIO as soon
			// as the leader's exit closed its files, before the exit is
			// complete, and a SIGHUP then would replace the exit status
			// it was exiting with. So the master stays open until the
			// status is in.
			<-p.exitCh
		}
		r.f.Close()
	}()
	buf := make([]byte, readSize)
	emit := func(b []byte) {
		data := make([]byte, len(b))
		copy(data, b)
		p.out.append(r.kind, data)
	}
	var after int64
	for {
		n, err := r.f.Read(buf)
		if n > 0 {
			emit(buf[:n])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The poller fails a read whose deadline has passed without
				// trying it: take what the pipe still holds.
				drainNow(r.f, buf, emit)
			}
			return
		}
		p.mu.Lock()
		exited, at := p.exited, p.exitedAt
		p.mu.Unlock()
		if exited {
			after += int64(n)
			if time.Since(at) > p.svc.cfg.DrainTimeout || after > drainBytes {
				return
			}
			r.f.SetReadDeadline(time.Now().Add(drainIdle))
		}
	}
}

// drainNow reads, without waiting, whatever f holds right now (at most
// drainBytes).
func drainNow(f *os.File, buf []byte, emit func([]byte)) {
	f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < drainBytes; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true // never wait for more
		}); err != nil {
			return
		}
		if rerr == unix.EINTR {
			continue
		}
		if rerr != nil || n <= 0 { // EAGAIN: empty; 0: EOF; EIO: PTY hung up
			return
		}
		emit(buf[:n])
		total += n
	}
}

// onExit is called by the reaper with the exit status.
func (p *proc) onExit(ws syscall.WaitStatus) {
	p.mu.Lock()
	p.exited, p.exitedAt, p.status = true, time.Now(), ws
	if p.deadline != nil {
		p.deadline.Stop()
	}
	readers := p.readers
	p.mu.Unlock()
	close(p.exitCh)
	p.out.release()
	for _, r := range readers {
		r.f.SetReadDeadline(time.Now().Add(drainIdle)) // ErrClosed if already done: fine
	}
	p.doneOne()
}

// doneOne counts down the readers and the exit status; the last one
// publishes the end event.
func (p *proc) doneOne() {
	p.mu.Lock()
	p.pending--
	last := p.pending == 0
	ws := p.status
	p.mu.Unlock()
	if !last {
		return
	}
	p.takeStdin().Close() // wakes a writer blocked on a pipe nobody reads
	p.out.finish(endEvent(ws))
	close(p.done)
	p.svc.retire(p)
}

func (p *proc) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) hasExited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// signal sends sig to the process's whole process group (it leads its own
// session). After the leader has exited this still reaches descendants left
// in the group; ESRCH means nobody is left.
func (p *proc) signal(sig syscall.Signal) error {
	return unix.Kill(-p.pid, sig)
}

// endEvent describes an exit status the way envd does (Go's ProcessState).
func endEvent(ws syscall.WaitStatus) *pb.ProcessEvent_EndEvent {
	e := &pb.ProcessEvent_EndEvent{
		ExitCode: int32(ws.ExitStatus()), // -1 unless exited
		Exited:   ws.Exited(),
		Status:   statusString(ws),
	}
	if ws.Signaled() {
		e.Signal = int32(ws.Signal())
	}
	return e
}

// statusString is os.ProcessState.String for a wait status.
func statusString(ws syscall.WaitStatus) string {
	var s string
	switch {
	case ws.Exited():
		s = fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		s = "signal: " + ws.Signal().String()
	case ws.Stopped():
		s = "stop signal: " + ws.StopSignal().String()
	case ws.Continued():
		s = "continued"
	}
	if ws.CoreDump() {
		s += " (core dumped)"
	}
	return s
}

// write sends input to the process: stdin bytes to its stdin pipe (or its
// PTY), PTY bytes to its PTY. It gives up when ctx ends.
func (p *proc) write(ctx context.Context, in *pb.ProcessInput) error {
	var data []byte
	var f *os.File
	p.inMu.Lock()
	defer p.inMu.Unlock()
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		p.fmu.Lock()
		data, f = v.Stdin, p.stdin
		p.fmu.Unlock()
		if p.pty != nil {
			f = p.pty
		} else if f == nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d: stdin is closed or was not requested", p.pid))
		}
	case *pb.ProcessInput_Pty:
		data, f = v.Pty, p.pty
		if f == nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no pty", p.pid))
		}
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input: stdin or pty bytes required"))
	}
	if len(data) == 0 {
		return nil
	}
	f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := f.Write(data)
	stop()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return connect.NewError(ctxCode(ctx), fmt.Errorf("write input to process %d: %w", p.pid, ctx.Err()))
	}
	if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EIO) {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write input to process %d: %w", p.pid, err))
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("write input to process %d: %w", p.pid, err))
}

// takeStdin detaches the stdin pipe (nil if there is none).
func (p *proc) takeStdin() *os.File {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	f := p.stdin
	p.stdin = nil
	return f
}

// closeStdin closes the stdin pipe so the process reads EOF. A write blocked
// on it fails. Closing it again is a no-op.
func (p *proc) closeStdin() error {
	if p.pty != nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has a pty: send the EOF character (ctrl-d) instead", p.pid))
	}
	if f := p.takeStdin(); f != nil {
		if err := f.Close(); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("close stdin of process %d: %w", p.pid, err))
		}
	}
	return nil
}

func (p *proc) resize(size *pb.PTY_Size) error {
	if p.pty == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no pty", p.pid))
	}
	if err := setWinsize(p.pty, size); err != nil {
		if p.hasExited() {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("resize pty of process %d: %w", p.pid, err))
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("resize pty of process %d: %w", p.pid, err))
	}
	return nil
}

// ctxCode is the Connect code for an ended context.
func ctxCode(ctx context.Context) connect.Code {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeCanceled
}
