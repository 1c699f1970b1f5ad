package process

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// ChildSpec describes a helper process the agent runs on a user's behalf
// outside the process.Process service (a code interpreter): it is not
// listed, has no output ring buffer and is not reachable by pid or tag.
type ChildSpec struct {
	User *sysuser.User
	Argv []string          // Argv[0] is searched in the child's PATH
	Env  map[string]string // over the defaults and the sandbox-wide environment
	Cwd  string            // must exist; "" for the default working directory
}

// Child is a running helper process. Its stdin is /dev/null; fd 1 and 2 are
// pipes read through Stdout and Stderr; fd 3 is a pipe the child reads
// (written through Control) and fd 4 a pipe it writes (read through
// Events).
type Child struct {
	Pid     int
	Stdout  *os.File
	Stderr  *os.File
	Control *os.File
	Events  *os.File

	done   chan struct{}
	mu     sync.Mutex
	status syscall.WaitStatus
}

// Done is closed once the child has exited (its pipes may still hold data).
func (c *Child) Done() <-chan struct{} { return c.done }

// Status is the exit status, valid once Done is closed.
func (c *Child) Status() syscall.WaitStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Signal sends sig to the child's process group (it leads its own session).
func (c *Child) Signal(sig syscall.Signal) error { return unix.Kill(-c.Pid, sig) }

// Close kills the child's process group and closes the agent's ends of its
// pipes.
func (c *Child) Close() {
	c.Signal(syscall.SIGKILL)
	for _, f := range []*os.File{c.Stdout, c.Stderr, c.Control, c.Events} {
		f.Close()
	}
}

// StartChild starts a helper process as cs.User through the agent's spawn
// thread (so it carries the same locked-down thread state as every user
// process) and its central reaper.
func (s *Service) StartChild(cs ChildSpec) (*Child, error) {
	if len(cs.Argv) == 0 || cs.User == nil {
		return nil, errors.New("start child: argv and user are required")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errors.New("start child: the agent is shutting down")
	}
	env, pathEnv, err := s.environ(cs.User, cs.Env)
	if err != nil {
		return nil, err
	}
	var cwdp *string
	if cs.Cwd != "" {
		cwdp = &cs.Cwd
	}
	cwd, err := s.workdir(cs.User, cwdp)
	if err != nil {
		return nil, err
	}
	path, err := lookPath(cs.Argv[0], pathEnv, cwd)
	if err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	var child, mine []*os.File
	ok := false
	defer func() {
		for _, f := range child {
			f.Close()
		}
		if !ok {
			for _, f := range mine {
				f.Close()
			}
		}
	}()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	child = append(child, null)
	c := &Child{done: make(chan struct{})}
	files := []uintptr{null.Fd(), 0, 0, 0, 0}
	for i := 1; i <= 4; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("start child: pipe: %w", err)
		}
		if i == 3 { // the child reads fd 3
			child, mine = append(child, r), append(mine, w)
			files[i] = r.Fd()
			c.Control = w
			continue
		}
		child, mine = append(child, w), append(mine, r)
		files[i] = w.Fd()
		switch i {
		case 1:
			c.Stdout = r
		case 2:
			c.Stderr = r
		case 4:
			c.Events = r
		}
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if cred := credential(cs.User); cred != nil {
		sys.Credential = cred
	}
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Files: files, Sys: sys}
	pid, err := forkExec(path, cs.Argv, attr, func(ws syscall.WaitStatus) {
		c.mu.Lock()
		c.status = ws
		c.mu.Unlock()
		close(c.done)
	})
	runtime.KeepAlive(child)
	if err != nil {
		return nil, fmt.Errorf("start %q as %s in %s: %w", cs.Argv[0], cs.User.Name, cwd, err)
	}
	c.Pid = pid
	ok = true
	return c, nil
}
