// Package sdktest runs the Python and TypeScript SDKs' own test suites (sdk/python/tests
// with pytest, sdk/ts/test with node's test runner) against one real wardend built from
// this tree, and type-checks the Python package with mypy. It needs root (wardend runs
// native sandboxes), Debian's python3-pytest and python3-mypy, node and tsc
// (scripts/install-deps.sh installs them).
package sdktest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// repoRoot is the repository root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// daemon is a wardend started for the suites.
type daemon struct {
	url, socket, key string
}

// startDaemon builds wardend and warden-agent into a temporary directory and starts the
// daemon on a fresh state directory; cleanup stops it and removes everything.
func startDaemon(t *testing.T) daemon {
	t.Helper()
	work, err := os.MkdirTemp("", "warden-sdk-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o755)
	t.Cleanup(func() { os.RemoveAll(work) })
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "github.com/warden-sandbox/warden/cmd/wardend",
		"github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	state, run := filepath.Join(work, "state"), filepath.Join(work, "run")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	sock := filepath.Join(run, "wardend.sock")
	var log bytes.Buffer
	d := exec.Command(filepath.Join(bin, "wardend"), "--listen", addr, "--socket", sock,
		"--state-dir", state, "--run-dir", run, "--agent", filepath.Join(bin, "warden-agent"), "--pool-size", "0",
		"--e2b-listen", "")
	d.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("wardend log:\n%s", log.String())
		}
		unmountUnder(work)
	})
	url := "http://" + addr
	// The first start snapshots the host's /usr for the base template: tens of seconds on
	// a busy machine.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-done:
			t.Fatalf("wardend exited: %v\n%s", d.ProcessState, log.String())
		default:
		}
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("wardend did not come up: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return daemon{url: url, socket: sock, key: strings.TrimSpace(string(key))}
}

// unmountUnder detaches every mount left under dir, deepest first.
func unmountUnder(dir string) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	lines := strings.Split(string(raw), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}

// pytest returns a python3 that can import pytest: Debian's first.
func pytest(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		tried = append(tried, path)
		if exec.Command(path, "-c", "import pytest, sys; assert sys.version_info >= (3, 11)").Run() == nil {
			return path
		}
	}
	t.Fatalf("no python3 (3.11+) with pytest among %v; scripts/install-deps.sh installs python3-pytest", tried)
	return ""
}

// runSuite runs a test command with the daemon's address and key in its environment and
// logs its output; a failing suite fails the test.
func runSuite(t *testing.T, dir string, d daemon, timeout time.Duration, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "WARDEN_URL="+d.url, "WARDEN_API_KEY="+d.key, "WARDEN_SOCKET="+d.socket,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out)
	if ctx.Err() != nil {
		t.Fatalf("%s timed out after %s", name, timeout)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestSDKs runs both SDK suites against one daemon.
func TestSDKs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: starts wardend, which needs root (CI runs as root)")
	}
	root := repoRoot(t)
	py := pytest(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (%v); scripts/install-deps.sh installs it", err)
	}
	d := startDaemon(t)
	// The suites share the daemon and run at once: each waits mostly on sandboxes.
	t.Run("python", func(t *testing.T) {
		t.Parallel()
		runSuite(t, filepath.Join(root, "sdk", "python"), d, 5*time.Minute, py,
			"-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "-rs", "tests")
	})
	// The type check needs no daemon; it runs beside the suites.
	t.Run("python-types", func(t *testing.T) {
		t.Parallel()
		if exec.Command(py, "-c", "import mypy").Run() != nil {
			t.Fatalf("%s cannot import mypy; scripts/install-deps.sh installs python3-mypy", py)
		}
		dir := filepath.Join(root, "sdk", "python")
		cmd := exec.Command(py, "-m", "mypy", "--cache-dir", filepath.Join(t.TempDir(), "mypy"),
			"--disallow-untyped-defs", "--disallow-incomplete-defs", "--warn-unused-ignores", "warden")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("mypy:\n%s", out)
		if err != nil {
			t.Fatalf("mypy: %v", err)
		}
	})
	t.Run("typescript", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(root, "sdk", "ts")
		tsc, err := exec.LookPath("tsc")
		if err != nil {
			t.Fatalf("tsc is not installed (%v); scripts/install-deps.sh installs typescript", err)
		}
		out := t.TempDir()
		build := exec.Command(tsc, "-p", dir, "--outDir", filepath.Join(out, "dist"))
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("tsc: %v\n%s", err, b)
		}
		tests, _ := filepath.Glob(filepath.Join(out, "dist", "test", "*.test.js"))
		if len(tests) == 0 {
			t.Fatal("tsc wrote no test files (dist/test/*.test.js)")
		}
		runSuite(t, dir, d, 5*time.Minute, node, append([]string{"--test", "--test-reporter=spec"}, tests...)...)
	})
}
