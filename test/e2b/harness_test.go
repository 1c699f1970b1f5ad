package e2bsdk

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// sdkWork prepares what every SDK suite of this package needs: a work
// directory holding an npm project with pkgs installed (e2b@SDKVersion
// when none are named) and wardend and warden-agent built into work/bin
// (startWardend runs them), and returns it with node's path. It skips only
// when not root (wardend needs it; CI runs as root); missing node or npm
// (scripts/install-deps.sh installs them) and a failed install fail the test.
func sdkWork(t *testing.T, name string, pkgs ...string) (work, node string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: starts wardend, which needs root (CI runs as root)")
	}
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		t.Fatalf("node or npm is not installed (%v, %v); scripts/install-deps.sh installs them", errNode, errNpm)
	}
	work, err := os.MkdirTemp("", "warden-e2b-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o755)
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"name":"warden-e2b-`+name+`","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		pkgs = []string{"e2b@" + SDKVersion}
	}
	ictx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inst := exec.CommandContext(ictx, npm, append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)...)
	inst.Dir = work
	if out, err := inst.CombinedOutput(); err != nil {
		t.Fatalf("npm install %v: %v\n%s", pkgs, err, out)
	}
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "github.com/warden-sandbox/warden/cmd/wardend", "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return work, node
}

// waitE2B waits for the E2B listener of a wardend started by a test to
// answer /health, failing with the daemon's log after 30 s.
func waitE2B(t *testing.T, addr string, log *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("wardend's E2B listener did not come up: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
