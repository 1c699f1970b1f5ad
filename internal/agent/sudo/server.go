package sudo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// request is the sudo program's one message (with its fds 0, 1, 2).
type request struct {
	Options
	Env []string `json:"env"` // the caller's environment
	Cwd string   `json:"cwd"` // the caller's working directory
}

// reply is what the agent answers: at most one of each, Exit or Signal or
// Error last.
type reply struct {
	Exit   *int   `json:"exit,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
}

// control is what the sudo program sends after its request: a signal to
// pass on to the command's process group.
type control struct {
	Signal int `json:"signal"`
}

const maxMsg = 256 << 10

// Server serves sudo requests by starting processes through Procs.
type Server struct {
	Procs *process.Service
	Log   *slog.Logger
}

// Listen creates the socket at path (its directory root's, 0755; the
// socket 0666: every process of the sandbox may ask) and serves it until
// ctx ends.
func (s *Server) Listen(ctx context.Context, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("sudo socket directory: %w", err)
	}
	os.Remove(path)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("sudo socket: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return fmt.Errorf("sudo socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go s.serve(l)
	return nil
}

func (s *Server) serve(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log().Warn("sudo: accept", "err", err)
			}
			return
		}
		go s.handle(c)
	}
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func send(c *net.UnixConn, r reply) {
	b, _ := json.Marshal(r)
	c.Write(b)
}

// handle serves one sudo call: read the request and its fds, start the
// command, pass on signals until it exits, send its status.
func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		send(c, reply{Error: "sudo: " + err.Error()})
		return
	}
	buf := make([]byte, maxMsg)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	files, err := receiveFiles(oob[:oobn])
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil || len(files) != 3 {
		send(c, reply{Error: "sudo: the request must carry three file descriptors (stdin, stdout, stderr)"})
		return
	}
	var req request
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		send(c, reply{Error: "sudo: bad request: " + err.Error()})
		return
	}
	ss, err := s.spec(req, cred)
	if err != nil {
		send(c, reply{Error: "sudo: " + err.Error()})
		return
	}
	ss.Stdio = [3]*os.File{files[0], files[1], files[2]}
	pid, done, err := s.Procs.StartStdio(ss)
	if err != nil {
		if errors.Is(err, process.ErrNotFound) {
			send(c, reply{Error: "sudo: " + ss.Argv[0] + ": command not found"})
		} else {
			send(c, reply{Error: "sudo: " + err.Error()})
		}
		return
	}
	for _, f := range files {
		f.Close() // the command holds them now
	}
	files = nil
	s.log().Info("sudo", "caller_uid", cred.Uid, "user", ss.User.Name, "argv0", ss.Argv[0], "pid", pid)
	// Signals from the caller go to the command's process group; the
	// caller going away hangs it up, as a closed terminal would.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		b := make([]byte, 512)
		for {
			n, err := c.Read(b)
			if err != nil {
				return
			}
			var m control
			if json.Unmarshal(b[:n], &m) == nil && m.Signal > 0 && m.Signal < 65 {
				unix.Kill(-pid, syscall.Signal(m.Signal))
			}
		}
	}()
	select {
	case ws := <-done:
		if ws.Signaled() {
			send(c, reply{Signal: int(ws.Signal())})
		} else {
			code := ws.ExitStatus()
			send(c, reply{Exit: &code})
		}
	case <-gone:
		unix.Kill(-pid, syscall.SIGHUP)
	}
}

// spec turns a request into the process to start: the target user, argv
// (a login shell for -i, a shell for -s), working directory and
// environment as sudo sets them.
func (s *Server) spec(req request, cred *unix.Ucred) (process.StdioSpec, error) {
	u, err := sysuser.Lookup(req.User)
	if err != nil {
		return process.StdioSpec{}, fmt.Errorf("unknown user %s", req.User)
	}
	callerEnv := map[string]string{}
	for _, kv := range req.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			callerEnv[k] = v
		}
	}
	env := map[string]string{}
	if req.PreserveEnv {
		for k, v := range callerEnv {
			env[k] = v
		}
	} else {
		for k, v := range callerEnv {
			if k == "TERM" || k == "COLORTERM" || k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") {
				env[k] = v
			}
		}
	}
	// As Debian's sudo: the target's identity and home, and who asked.
	env["HOME"], env["USER"], env["LOGNAME"] = u.Home, u.Name, u.Name
	if u.Shell != "" {
		env["SHELL"] = u.Shell
	}
	env["SUDO_UID"] = strconv.FormatUint(uint64(cred.Uid), 10)
	env["SUDO_GID"] = strconv.FormatUint(uint64(cred.Gid), 10)
	env["SUDO_USER"] = sysuser.UserName(cred.Uid)
	env["SUDO_COMMAND"] = strings.Join(req.Command, " ")
	shell := u.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	ss := process.StdioSpec{User: u, Env: env, Cwd: req.Cwd, Clean: req.PreserveEnv}
	switch {
	case req.Login:
		ss.Cwd = u.Home
		ss.Argv = []string{shell, "-l"}
		if len(req.Command) > 0 {
			ss.Argv = append(ss.Argv, "-c", shellJoin(req.Command))
		}
	case req.Shell:
		if sh := callerEnv["SHELL"]; sh != "" {
			shell = sh
		}
		ss.Argv = []string{shell}
		if len(req.Command) > 0 {
			ss.Argv = append(ss.Argv, "-c", shellJoin(req.Command))
		}
	default:
		ss.Argv = req.Command
	}
	if len(ss.Argv) == 0 || ss.Argv[0] == "" {
		return ss, errors.New("a command is required")
	}
	if ss.Cwd != "" {
		if fi, err := os.Stat(ss.Cwd); err != nil || !fi.IsDir() {
			ss.Cwd = "" // as sudo: run from where it can
		}
	}
	return ss, nil
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("peer credentials: %w", cerr)
	}
	return cred, nil
}

func receiveFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "sudo-stdio"))
		}
	}
	return files, nil
}
