package gvisor_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/template"
)

var (
	agentBin string
	runDir   string
	tmplRoot string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "SKIP: the gvisor backend tests need root (CI runs as root); skipping the whole package")
		return 0
	}
	dir, err := os.MkdirTemp("", "warden-gvisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build warden-agent: %v\n%s", err, out)
		return 1
	}
	runDir = filepath.Join(dir, "run")
	tmplRoot = filepath.Join(dir, "templates")
	// runsc keeps one empty network namespace for the gofers of all the
	// sandboxes under its state directory, bind-mounted there.
	defer unix.Unmount(filepath.Join(runDir, ".runsc", "null-netns"), unix.MNT_DETACH)
	return m.Run()
}

func newBackend(t *testing.T) backend.Backend {
	t.Helper()
	if err := gvisor.Preflight(); err != nil {
		t.Fatalf("the gvisor backend cannot run here: %v", err)
	}
	b, err := gvisor.New(gvisor.Config{RunDir: runDir, AgentPath: agentBin})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func baseSpec(t *testing.T, id string) backend.Spec {
	t.Helper()
	tm, err := template.EnsureBase(tmplRoot)
	if err != nil {
		t.Fatalf("base template: %v", err)
	}
	return tm.Spec(id)
}

// leftovers looks for anything on the host that still belongs to sandbox id.
func leftovers(t *testing.T, id string) []string {
	var left []string
	if _, err := os.Stat(filepath.Join(runDir, id)); err == nil {
		left = append(left, "run directory "+filepath.Join(runDir, id))
	}
	cg := "gv-" + id
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/warden/" + cg)
	left = append(left, matches...)
	if _, err := os.Stat("/sys/fs/cgroup/warden/" + cg); err == nil {
		left = append(left, "/sys/fs/cgroup/warden/"+cg)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "/"+cg+"\n") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p)))
		}
	}
	// Processes of the sandbox by command line too (a sentry or gofer that
	// never made it into the cgroup).
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), filepath.Join(runDir, id)+"/") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), id) {
				left = append(left, "mount "+sc.Text())
			}
		}
		f.Close()
	}
	// runsc's state for the container.
	state, _ := os.ReadDir(filepath.Join(runDir, ".runsc"))
	for _, e := range state {
		if strings.Contains(e.Name(), id) {
			left = append(left, "runsc state "+e.Name())
		}
	}
	return left
}

// hostPaths are the gvisor backend's host paths that no sandbox may see.
func hostPaths(t *testing.T, h backend.Handle) []string {
	d := filepath.Join(runDir, h.ID)
	return []string{runDir, d, filepath.Join(d, "control"), filepath.Join(d, "control", "agent.sock"), filepath.Join(d, "rootfs"),
		filepath.Join(d, "upper"), filepath.Join(d, "bundle", "config.json"), filepath.Join(runDir, ".runsc"),
		filepath.Join(runDir, ".warden-agent"), agentBin, tmplRoot}
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{New: newBackend, Spec: baseSpec, Leftovers: leftovers, HostPaths: hostPaths})
}
