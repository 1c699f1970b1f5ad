// Package integration builds Warden's real binaries, starts the real daemon
// on a temporary state directory and drives it through the Go SDK and the
// CLI, as users do. It needs root (CI runs as root).
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "SKIP: integration tests start wardend, which needs root (CI runs as root); skipping the package")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "warden-it-bin-")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	binDir = dir
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/warden-sandbox/warden/cmd/wardend",
		"github.com/warden-sandbox/warden/cmd/warden", "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	// One base template for every daemon of the run: a base version holds
	// a hard-link snapshot of the host's /usr (about 180k entries), which
	// takes seconds to make and more to delete, per state directory.
	// newDirs links each daemon's templates/base here; EnsureBase's lock
	// makes concurrent builds of one version safe.
	sharedBase, err = os.MkdirTemp("", "warden-it-base-")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	for _, d := range npmDirs.dirs {
		os.RemoveAll(d.dir)
	}
	os.RemoveAll(dir)
	os.RemoveAll(sharedBase)
	os.Exit(code)
}

// sharedBase is the base template directory every newDirs state links to.
var sharedBase string

// daemon is a running wardend.
type daemon struct {
	t        *testing.T
	cmd      *exec.Cmd
	stateDir string
	runDir   string
	url      string
	socket   string
	adminKey string
	log      *logBuf
}

// logBuf collects a daemon's output. exec copies the output into it from
// its own goroutine, so reads take the lock, and a line the daemon has
// written may arrive a moment after the event a test waited for: use waitFor.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor reports whether the log contains sub within d.
func (b *logBuf) waitFor(sub string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if strings.Contains(b.String(), sub) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// newDirs makes a state and run dir for a daemon.
func newDirs(t *testing.T) (state, run string) {
	base, err := os.MkdirTemp("", "warden-it-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	state = filepath.Join(base, "state")
	if err := os.MkdirAll(filepath.Join(state, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sharedBase, filepath.Join(state, "templates", "base")); err != nil {
		t.Fatal(err)
	}
	return state, filepath.Join(base, "run")
}

// startDaemon starts wardend on the given dirs and waits until it serves.
func startDaemon(t *testing.T, state, run string, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, state, run, nil, extra...)
}

// e2bDefault, in startDaemon's extra arguments, leaves the E2B API at
// wardend's default address instead of off.
const e2bDefault = "(e2b-default)"

// startDaemonEnv is startDaemon with env added to wardend's environment.
func startDaemonEnv(t *testing.T, state, run string, env []string, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, stateDir: state, runDir: run, log: &logBuf{}}
	addr := freePort(t)
	d.url = "http://" + addr
	d.socket = filepath.Join(run, "wardend.sock")
	args := []string{"--listen", addr, "--socket", d.socket, "--state-dir", state, "--run-dir", run,
		"--agent", filepath.Join(binDir, "warden-agent"), "--landlock", "require",
		// No warm pool unless a test asks (--pool-size N in extra, which wins):
		// tests that look for a sandbox's host resources by its id need the
		// id-named directories a pooled sandbox does not have.
		"--pool-size", "0",
		// A root-only socket unless a test asks (--socket-group G in extra):
		// the default group, warden, would be created on the host.
		"--socket-group", ""}
	// No E2B API unless a test asks (--e2b-listen ADDR in extra, which
	// wins): the default 127.0.0.1:3000 would collide between daemons. The
	// pseudo-flag e2bDefault keeps wardend's default.
	if i := slices.Index(extra, e2bDefault); i >= 0 {
		extra = slices.Delete(slices.Clone(extra), i, i+1)
	} else {
		args = append(args, "--e2b-listen", "")
	}
	args = append(args, extra...)
	d.cmd = exec.Command(filepath.Join(binDir, "wardend"), args...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Sandboxes outlive their daemon by design: kill what the test left
		// running before stopping it, so nothing leaks past the test.
		if d.cmd != nil && d.adminKey != "" {
			c := d.client(t, d.adminKey)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, st := range []warden.SandboxState{"running", "starting", "paused"} {
				for sb, err := range c.AllSandboxes(ctx, warden.ListOptions{State: st}) {
					if err != nil {
						break
					}
					c.KillSandbox(ctx, sb.ID)
				}
			}
		}
		d.stop(syscall.SIGTERM)
	})
	// The first daemon of a run builds the shared base template (a
	// hard-link snapshot of /usr), which takes a minute on a busy host.
	deadline := time.Now().Add(120 * time.Second)
	for {
		resp, err := http.Get(d.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) || d.cmd.ProcessState != nil {
			t.Fatalf("wardend did not come up: %v\n%s", err, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	d.adminKey = strings.TrimSpace(string(key))
	return d
}

// stop ends the daemon with sig and waits for it.
func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
}

// client returns an SDK client with key.
func (d *daemon) client(t *testing.T, key string) *warden.Client {
	t.Helper()
	c, err := warden.New(warden.WithBaseURL(d.url), warden.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cli runs the warden CLI against the daemon with the admin key.
func (d *daemon) cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "warden"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "WARDEN_URL=" + d.url, "WARDEN_API_KEY=" + d.adminKey, "HOME=" + t.TempDir()}
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run warden %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poolDirs lists the warm pool's sandboxes on the host.
func poolDirs(run string) ([]string, error) {
	return filepath.Glob(filepath.Join(run, "native", "pool-*"))
}
