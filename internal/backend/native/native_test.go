package native_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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
	if pre := os.Getenv("WARDEN_TEST_AGENT"); pre != "" {
		// A prebuilt agent (scripts/cgroup2-vm.sh: the VM has no Go toolchain).
		agentBin = pre
	} else {
		build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build warden-agent: %v\n%s", err, out)
			return 1
		}
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
	cfg := native.Config{RunDir: runDir, AgentPath: agentBin, Landlock: testLandlock()}
	if os.Getenv("WARDEN_TEST_DISK") != "" {
		// Writable layers on disk images, as wardend has them by default:
		// scripts/cgroup2-vm.sh sets it, since Debian 12's tmpfs cannot
		// hold the overlay's attributes (the in-memory layer is refused).
		cfg.DiskDir = filepath.Join(filepath.Dir(runDir), "disks")
	}
	b, err := native.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Close unmounts the sudo fs where the kernel needs it attached.
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return b
}

// testLandlock is the Landlock mode of the tests' backends: "require" (CI's
// kernel has the ABI), or WARDEN_TEST_LANDLOCK; a kernel without the ABI
// (Debian 12's 6.1, in scripts/cgroup2-vm.sh) runs the suite as wardend's
// default does, with best-effort.
func testLandlock() string {
	if v := os.Getenv("WARDEN_TEST_LANDLOCK"); v != "" {
		return v
	}
	return "require"
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
	backendtest.Run(t, backendtest.Factory{New: newBackend, Spec: baseSpec, Leftovers: leftovers, HostPaths: hostPaths,
		HostDisk: func(t *testing.T, h backend.Handle) []string {
			if os.Getenv("WARDEN_TEST_DISK") == "" {
				return nil // writable layers in memory: nothing of the sandbox on the host's disk
			}
			return []string{filepath.Join(filepath.Dir(runDir), "disks", h.ID+".img")}
		}})
}

// nsGetOwnerUID is ioctl NS_GET_OWNER_UID (linux/nsfs.h: _IO(0xb7, 0x4)).
const nsGetOwnerUID = 0xb704

// TestUsernsOwner: each sandbox's user namespace is owned by the first uid
// of its own host range, never by wardend's uid 0, so the kernel's per-user
// counts (inotify instances, pending signals, mqueue bytes...) of one
// sandbox are charged to a host uid of its own; and no thread of the
// backend's process keeps the credentials it started them with.
func TestUsernsOwner(t *testing.T) {
	b := newBackend(t)
	owners := map[uint32]string{}
	for range 2 {
		sb := backendtest.Start(t, backendtest.Factory{New: newBackend, Spec: baseSpec}, b, nil)
		var hd struct {
			UIDBase uint32 `json:"uid_base"`
		}
		if err := json.Unmarshal(sb.H.Data, &hd); err != nil || hd.UIDBase == 0 {
			t.Fatalf("handle data %s: %v", sb.H.Data, err)
		}
		pid, err := b.(*native.Backend).PID(context.Background(), sb.H)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		owner, err := unix.IoctlGetUint32(fd, nsGetOwnerUID)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("NS_GET_OWNER_UID: %v", err)
		}
		if owner != hd.UIDBase {
			t.Errorf("sandbox %s: user namespace owned by host uid %d, want its own uid base %d (a namespace owned by root charges every sandbox's inotify instances and pending signals to host root)", sb.H.ID, owner, hd.UIDBase)
		}
		if other, dup := owners[owner]; dup {
			t.Errorf("sandboxes %s and %s share the user namespace owner %d", other, sb.H.ID, owner)
		}
		owners[owner] = sb.H.ID
	}
	// The thread that started them has its own credentials back (it was
	// ended, or, had it been the main thread, parked for good).
	if bad := altered(t); len(bad) > 0 {
		t.Fatalf("threads of the test process still carry altered credentials: %v", bad)
	}
}

// altered lists this process's threads whose real, effective, saved or
// filesystem uid is not 0.
func altered(t *testing.T) []string {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" && (f[1] != "0" || f[2] != "0" || f[3] != "0" || f[4] != "0") {
				bad = append(bad, p+": "+line)
			}
		}
	}
	return bad
}
