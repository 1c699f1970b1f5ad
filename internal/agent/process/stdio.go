package process

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// StdioSpec describes a process the agent runs with a caller's own
// standard streams (the sudo shim's: it passes its fds 0, 1 and 2 over a
// unix socket). Like a Child it is not listed and has no output buffer.
type StdioSpec struct {
	User  *sysuser.User
	Argv  []string          // Argv[0] is searched in the process's PATH
	Env   map[string]string // over the defaults (and, unless Clean, the sandbox-wide environment)
	Clean bool              // Env is the whole environment: no defaults, no sandbox-wide variables
	Cwd   string            // "" for the default working directory
	Stdio [3]*os.File       // the process's fds 0, 1 and 2; the caller keeps and closes them
}

// ErrNotFound is wrapped by StartStdio when Argv[0] is not an executable
// in the process's PATH.
var ErrNotFound = errors.New("command not found")

// StartStdio starts a process as ss.User with the given standard streams,
// in a session of its own, through the agent's spawn thread and its
// central reaper. done receives the wait status once it has exited.
func (s *Service) StartStdio(ss StdioSpec) (pid int, done <-chan syscall.WaitStatus, err error) {
	if len(ss.Argv) == 0 || ss.User == nil {
		return 0, nil, errors.New("start: argv and user are required")
	}
	for _, f := range ss.Stdio {
		if f == nil {
			return 0, nil, errors.New("start: three standard streams are required")
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, nil, errors.New("start: the agent is shutting down")
	}
	var env []string
	pathEnv := DefaultPath
	if ss.Clean {
		for k, v := range ss.Env {
			env = append(env, k+"="+v)
		}
		if p, ok := ss.Env["PATH"]; ok {
			pathEnv = p
		}
	} else if env, pathEnv, err = s.environ(ss.User, ss.Env); err != nil {
		return 0, nil, err
	}
	var cwdp *string
	if ss.Cwd != "" {
		cwdp = &ss.Cwd
	}
	cwd, err := s.workdir(ss.User, cwdp)
	if err != nil {
		return 0, nil, err
	}
	path, err := lookPath(ss.Argv[0], pathEnv, cwd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w: %w", ss.Argv[0], ErrNotFound, err)
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if cred := credential(ss.User); cred != nil {
		sys.Credential = cred
	}
	ch := make(chan syscall.WaitStatus, 1)
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Files: []uintptr{ss.Stdio[0].Fd(), ss.Stdio[1].Fd(), ss.Stdio[2].Fd()}, Sys: sys}
	pid, err = forkExec(path, ss.Argv, attr, func(ws syscall.WaitStatus) { ch <- ws })
	runtime.KeepAlive(ss.Stdio)
	if err != nil {
		return 0, nil, fmt.Errorf("start %q as %s in %s: %w", ss.Argv[0], ss.User.Name, cwd, err)
	}
	return pid, ch, nil
}
