package main

import (
	"encoding/json"
	"golang.org/x/sys/unix"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSmoke runs the whole benchmark in a short mode against a real wardend
// (the native backend in-process, then the daemon over HTTP: sequential,
// cold and burst creates, exec, files, a small density sweep) and checks
// that every measurement works end to end and the JSON and the chart are
// written; not how fast anything is.
func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the benchmark starts real sandboxes and needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bubblewrap is not installed: run scripts/install-deps.sh")
	}
	// Not t.TempDir(): its parent is 0700, and sandboxes exec the agent
	// (installed in the run directory below) as an unprivileged host uid.
	dir, err := os.MkdirTemp("", "warden-bench-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// runsc leaves one bind mount (the gofers' empty network namespace)
	// in its state directory, on purpose; it must go before the directory.
	t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "drun", "gvisor", ".runsc", "null-netns"), unix.MNT_DETACH) })
	os.Chmod(dir, 0o755)
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/warden-sandbox/warden/cmd/warden-agent", "github.com/warden-sandbox/warden/cmd/wardend")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	agent := filepath.Join(dir, "warden-agent")

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(dir, "wardend.yaml")
	os.WriteFile(cfg, []byte("version: 1\nrate_limit: -1\n"), 0o644)
	d := exec.Command(filepath.Join(dir, "wardend"), "--config", cfg, "--listen", addr, "--socket", "",
		"--state-dir", filepath.Join(dir, "dstate"), "--run-dir", filepath.Join(dir, "drun"), "--agent", agent, "--pool-size", "2")
	var log strings.Builder
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		d.Wait()
		if t.Failed() {
			t.Logf("wardend log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("wardend did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(dir, "dstate", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WARDEN_API_KEY", strings.TrimSpace(string(key)))

	jsonOut, chart := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	if err := run(opts{n: 2, agent: agent, state: filepath.Join(dir, "state"), json: jsonOut, chart: chart,
		api: "http://" + addr, burst: 3, big: 1 << 20, density: []int{2, 4}, net: 4 << 20, idle: 3}); err != nil {
		t.Fatal(err)
	}
	var res results
	raw, err := os.ReadFile(jsonOut)
	if err != nil || json.Unmarshal(raw, &res) != nil {
		t.Fatalf("JSON output: %v", err)
	}
	names := map[string]bool{}
	for _, s := range res.Summaries {
		names[s.Name] = true
		if s.N == 0 {
			t.Errorf("%s: no samples", s.Name)
		}
	}
	for _, want := range []string{"baseline: bwrap --unshare-all /bin/true", "native: create → first output (echo)",
		"api: create → first output (sequential, warm pool)", "api: create → first output (cold, no pool)",
		"api: create → first output (3 in flight)", "api: exec round trip (true)", "api: upload 1 MiB",
		"api: create → first output, network allowlist", "api: create → first output, network open",
		"download 4 MiB from the fake host, in a sandbox (allowlist)",
		"baseline: runsc do true (systrap)", "baseline: 3 bwrap launches at once", "api: pause, idle sandbox (native)", "api: resume → first output (native)",
		"api: pause, idle sandbox (gvisor)", "api: resume, idle sandbox (gvisor)", "api: fork 1 → first output (gvisor)",
		"api: create → first output (gvisor, no pool)", "api: create → first output, network allowlist (gvisor)",
		"download 4 MiB from the fake host, in a sandbox (allowlist) (gvisor)"} {
		if !names[want] {
			t.Errorf("no %q in the results", want)
		}
	}
	if len(res.Density) != 2 || res.Density[1].N != 4 || res.Density[1].CgroupMiBPer <= 0 {
		t.Errorf("density sweep: %+v", res.Density)
	}
	// The idle measurement found the sandboxes' cgroups (it fails when it
	// cannot) and wardend by its listening port.
	if r := res.IdleCPU; r == nil || r.N != 3 || r.WindowSeconds < idleWindow.Seconds() || r.SandboxesMS < 0 ||
		r.WardendPID != d.Process.Pid || r.WardendMS < 0 {
		t.Errorf("idle CPU: %+v (wardend is pid %d)", r, d.Process.Pid)
	} else {
		t.Log(r.String())
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasPrefix(n, "idle CPU: 3 idle native sandboxes") }) {
		t.Errorf("no idle CPU note in %q", res.Notes)
	}
	if b, err := os.ReadFile(chart); err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Errorf("chart: %v", err)
	}
}
