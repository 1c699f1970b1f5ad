package native_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/native"
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
		fmt.Fprintln(os.Stderr, "SKIP: the native backend tests need root (CI runs as root); skipping the whole package")
		return 0
	}
	dir, err := os.MkdirTemp("", "warden-native-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	agentBin = filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build warden-agent: %v\n%s", err, out)
		return 1
	}
	runDir = filepath.Join(dir, "run")
	tmplRoot = filepath.Join(dir, "templates")
	return m.Run()
}

func newBackend(t *testing.T) backend.Backend {
	t.Helper()
	if err := native.Preflight(); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	b, err := native.New(native.Config{RunDir: runDir, AgentPath: agentBin, Landlock: "require"})
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
	cg := "sb-" + id
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
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), id) {
				left = append(left, "mount "+sc.Text())
			}
		}
		f.Close()
	}
	return left
}

// hostPaths are the native backend's host paths that no sandbox may see.
func hostPaths(t *testing.T, h backend.Handle) []string {
	return []string{runDir, filepath.Join(runDir, h.ID), filepath.Join(runDir, h.ID, "agent.sock"), agentBin, tmplRoot}
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{New: newBackend, Spec: baseSpec, Leftovers: leftovers, HostPaths: hostPaths})
}
