package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSmoke runs the benchmark in a short mode: it checks that every
// measurement works end to end, not how fast it is.
func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the benchmark starts real sandboxes and needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIP: bubblewrap is not installed (scripts/install-deps.sh installs it)")
	}
	// Not t.TempDir(): its parent is 0700, and sandboxes exec the agent
	// (installed in the run directory below) as an unprivileged host uid.
	dir, err := os.MkdirTemp("", "warden-bench-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	agent := filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agent, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	if err := run(2, agent, filepath.Join(dir, "state"), filepath.Join(dir, "out.json"), "", 0, 0); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "out.json")); err != nil || st.Size() == 0 {
		t.Fatalf("no JSON written: %v", err)
	}
}
