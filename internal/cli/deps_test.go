package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// allowedDeps are the only packages outside the standard library that the warden command
// may link: the SDK and what it needs, the terminal package and the progress bar. Everything reaches the
// daemon through the SDK; the daemon's packages (the store, the backends, cgroups,
// seccomp ...) must never end up in the CLI.
var allowedDeps = []string{
	"github.com/warden-sandbox/warden/internal/cli",
	"github.com/warden-sandbox/warden/sdk/go",
	"github.com/coder/websocket",
	"golang.org/x/term",
	"golang.org/x/sys/",
	// Policy files (warden policy create|edit|test -f FILE.yaml).
	"go.yaml.in/yaml/v3",
	// The progress bars of template builds and imports (issue 5 asks for a maintained
	// progress library) and their two small dependencies.
	"github.com/schollz/progressbar/v3",
	"github.com/mitchellh/colorstring",
	"github.com/rivo/uniseg",
}

// TestDeps lists the transitive imports of the CLI (as tailscale's deptest does) for each
// target system and fails on any internal package other than internal/cli, or any module
// outside allowedDeps.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
			"github.com/warden-sandbox/warden/internal/cli", "github.com/warden-sandbox/warden/cmd/warden")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, ee.Stderr)
			}
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if pkg == "github.com/warden-sandbox/warden/cmd/warden" {
				continue
			}
			if strings.HasPrefix(pkg, "github.com/warden-sandbox/warden/internal/") && pkg != "github.com/warden-sandbox/warden/internal/cli" {
				t.Errorf("GOOS=%s: the CLI imports %s; it must reach the daemon only through sdk/go", goos, pkg)
				continue
			}
			if !allowed(pkg) {
				t.Errorf("GOOS=%s: the CLI imports %s, which is not in allowedDeps", goos, pkg)
			}
		}
	}
}

func allowed(pkg string) bool {
	for _, a := range allowedDeps {
		if pkg == a || strings.HasPrefix(pkg, strings.TrimSuffix(a, "/")+"/") {
			return true
		}
	}
	return false
}
