package ginit

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
)

// Checkpoints.
//
// gVisor cannot save a socket bound on the host (--host-uds=create), nor a
// connection accepted on one, so before `runsc checkpoint` the backend asks
// the agent to let go of every host-backed socket (POST SuspendPath on the
// init's own socket, ControlSocketName, which only the gvisor backend
// dials: requests the daemon relays to the agent socket, such as the E2B
// proxy's, never reach it): the init closes the agent's, its own and the
// watchdog's listeners and every connection they accepted, then creates
// SuspendedName in the control directory, which the backend waits for. It removes the file again once it listens after a resume. Processes and their pipes, in-sandbox sockets and files are
// untouched and are saved. After `runsc restore` (or a failed checkpoint)
// the backend sends the init SIGUSR2 (`runsc kill`), and the init listens
// again. A SIGUSR2 while serving does nothing, so sandbox code gains
// nothing by sending one; root inside may still POST to nothing: the
// socket is unreachable from inside.
//
// The control directory was unmounted at boot so that no path inside leads
// to it; the init keeps a descriptor of it and binds through
// /proc/self/fd/N, which gVisor resolves to the hidden directory.

// SuspendPath and SuspendedName: see package gwire.
const (
	SuspendPath   = gwire.SuspendPath
	SuspendedName = gwire.SuspendedName
)

// control is the host-backed control directory and what the init serves
// from it.
type control struct {
	dir *os.File // O_PATH descriptor of ControlDir, kept after it is hidden

	mu        sync.Mutex
	srv       *http.Server // the agent's
	ctlSrv    *http.Server // the init's own (SuspendPath)
	wakeLn    net.Listener
	suspended bool
	resume    chan struct{}
}

// path is name in the control directory, reachable through the descriptor.
func (c *control) path(name string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", c.dir.Fd(), name)
}

// listen binds the agent's, the init's own and the watchdog's sockets in
// the control directory (host sockets, through --host-uds=create).
func (c *control) listen() (agentLn, ctlLn, wakeLn net.Listener, err error) {
	bind := func(name string) (net.Listener, error) {
		p := c.path(name)
		os.Remove(p) // the socket file of an earlier boot or of before a checkpoint
		ln, err := net.Listen("unix", p)
		if err != nil {
			return nil, err
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		return ln, nil
	}
	if agentLn, err = bind(SocketName); err != nil {
		return nil, nil, nil, fmt.Errorf("agent socket: %w", err)
	}
	if ctlLn, err = bind(ControlSocketName); err != nil {
		agentLn.Close()
		return nil, nil, nil, fmt.Errorf("control socket: %w", err)
	}
	if wakeLn, err = bind(WatchdogSocketName); err != nil {
		agentLn.Close()
		ctlLn.Close()
		return nil, nil, nil, fmt.Errorf("watchdog socket: %w", err)
	}
	return agentLn, ctlLn, wakeLn, nil
}

// controlHandler serves the init's own socket: SuspendPath, nothing else.
func (c *control) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+SuspendPath, c.serveSuspend)
	return mux
}

// serveSuspend answers the backend, then closes every host socket.
func (c *control) serveSuspend(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusAccepted)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	go c.suspend()
}

// suspend closes the listeners and all their connections (the watchdog's
// through its own close), then says so in the control directory.
func (c *control) suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.suspended || c.srv == nil {
		return
	}
	c.suspended = true
	c.srv.Close() // the listener and every connection, hijacked ones included
	if c.ctlSrv != nil {
		c.ctlSrv.Close() // this request's connection too: its answer is flushed
	}
	if c.wakeLn != nil {
		c.wakeLn.Close()
	}
	onSuspend()
	f, err := os.OpenFile(c.path(SuspendedName), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		slog.Error("suspend: mark suspended", "err", err)
		return
	}
	f.Close()
}

// onSuspend closes what else holds a host connection (the watchdog's
// connections from the host); set by Run.
var onSuspend = func() {}

// wakeOnResume turns SIGUSR2 into a resume while suspended.
func (c *control) signal(sig os.Signal) {
	if sig != unix.SIGUSR2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.suspended {
		c.suspended = false
		select {
		case c.resume <- struct{}{}:
		default:
		}
	}
}

// openControlDir opens the control directory's descriptor and the OOM
// counter, then hides the directory (see hideDir for the rest).
func openControlDir() (*control, *os.File, error) {
	fd, err := unix.Open(ControlDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control directory: %w", err)
	}
	c := &control{dir: os.NewFile(uintptr(fd), ControlDir), resume: make(chan struct{}, 1)}
	oom, err := os.OpenFile(ControlDir+"/"+OOMFileName, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		c.dir.Close()
		return nil, nil, fmt.Errorf("oom counter: %w", err)
	}
	os.Remove(c.path(SuspendedName))
	return c, oom, nil
}

// hide unmounts the control directory: only the descriptor reaches it now.
func (c *control) hide() error {
	if err := unix.Unmount(ControlDir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("hide %s: %w", ControlDir, err)
	}
	return nil
}
