package fake

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// agentEnv names, in the environment of a re-executed test binary, the
// sandbox directory whose agent it is to serve.
const agentEnv = "WARDEN_FAKE_AGENT_DIR"

// init turns a re-executed test binary into a sandbox's agent (see Start).
// The agent never passes its own environment to the processes it starts, so
// they do not inherit the variable.
func init() {
	if dir := os.Getenv(agentEnv); dir != "" {
		if err := serveAgent(dir); err != nil {
			fmt.Fprintln(os.Stderr, "fake agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// serveAgent serves the real agent for the sandbox in dir on its socket
// until SIGTERM, then ends every process it started.
func serveAgent(dir string) error {
	var af agentFile
	if err := readJSON(filepath.Join(dir, "agent.json"), &af); err != nil {
		return err
	}
	// The sandbox's users, not the host's.
	sysuser.PasswdFile = filepath.Join(dir, "passwd")
	sysuser.GroupFile = filepath.Join(dir, "group")
	// Daemonised processes stay under the agent, where Kill and Pause find
	// them, as they stay in a sandbox whose PID 1 is the agent.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	if err := confineWrites(dir); err != nil {
		return err
	}
	os.Remove(af.Socket)
	ln, err := net.Listen("unix", af.Socket)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a := agent.New(af.Agent)
	defer a.Close()
	return a.Serve(ctx, ln)
}

// confineWrites limits, with Landlock where the kernel has it, what the
// agent and every process under it may change on the host to the sandbox
// directory and the terminal and null devices: a test that writes an
// absolute path such as /tmp/x, meant for a real sandbox's own /tmp, fails
// instead of leaving files on the host. Reading and executing stay allowed
// everywhere. This is a guard for tests, not isolation.
func confineWrites(dir string) error {
	devs := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}
	err := landlock.V5.BestEffort().RestrictPaths(
		landlock.RODirs("/"),
		landlock.RWDirs(dir).WithRefer(),
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWFiles(devs...).WithIoctlDev().IgnoreIfMissing(),
	)
	if err != nil {
		return fmt.Errorf("confine writes to %s: %w", dir, err)
	}
	return nil
}
