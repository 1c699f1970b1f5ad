package e2b

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/backend/native"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/template"
)

// useFake says whether the tests run against the fake backend
// (internal/backend/fake): when WARDEN_TEST_BACKEND=fake, or when not root,
// since the native backend needs root. As root (CI) they run real native
// sandboxes; CI runs them on the fake as well.
var useFake = os.Getenv("WARDEN_TEST_BACKEND") == "fake" || os.Geteuid() != 0

// testBackend returns the backend the tests run against, its state under dir.
func testBackend(dir string) (backend.Backend, error) {
	if useFake {
		fmt.Fprintln(os.Stderr, "e2b tests: the fake backend (no isolation); tests that need a real sandbox are skipped (run as root for the native backend)")
		// The fake ignores layers: an empty base template, which needs no
		// root to build (the store is opened at dir/templates).
		if err := template.EnsureEmptyBase(filepath.Join(dir, "templates")); err != nil {
			return nil, err
		}
		return fake.New(fake.Config{StateDir: filepath.Join(dir, "fake")})
	}
	agentBin := filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build warden-agent: %v\n%s", err, out)
	}
	if err := native.Preflight(); err != nil {
		return nil, fmt.Errorf("native preflight: %w", err)
	}
	return native.New(native.Config{RunDir: filepath.Join(dir, "run"), AgentPath: agentBin})
}

// testBackendID is the name sandboxes report for their backend.
func testBackendID() string {
	if useFake {
		return fake.ID
	}
	return "native"
}

// testNetwork returns the sandbox network manager: real networking on the
// native backend, none on the fake (it needs root, and the fake runs on the
// host's network).
func testNetwork() (*network.Manager, error) {
	if useFake {
		return nil, nil
	}
	// Its DNS upstream is a closed local port, so nothing leaves the machine.
	return network.New(network.Config{DNSUpstream: "127.0.0.1:9"})
}

// needsRealSandbox skips t on the fake backend: t relies on what only a real
// sandbox has (the template's users and files at /home/user, /tmp and /root,
// its tools, its own /proc or network).
func needsRealSandbox(t *testing.T) {
	t.Helper()
	if useFake {
		t.Skip("SKIPPED LOUDLY: needs root: real sandbox (the fake backend runs commands on the host as the test's user); run as root for the native backend")
	}
}
