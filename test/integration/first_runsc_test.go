package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFirstRunscLate: a daemon started before runsc is installed serves
// native sandboxes and says gvisor is not ready (log, `warden version`,
// /healthz); once runsc appears (scripts/run.sh builds it in the
// background) the next gvisor create works without a restart, and the
// version and health report both backends.
func TestFirstRunscLate(t *testing.T) {
	const runsc = "/usr/local/bin/runsc"
	if _, err := os.Stat(runsc); err != nil {
		t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
	}
	// The daemon's PATH: a directory runsc appears in later, then the
	// system's without /usr/local/bin (where the real runsc lives).
	late := t.TempDir()
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemonEnv(t, state, run, []string{"PATH=" + late + ":/usr/sbin:/usr/bin:/sbin:/bin"})
	health := func() []string {
		resp, err := http.Get(d.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Backends []string `json:"backends"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		return h.Backends
	}

	if !d.log.waitFor("the gvisor backend is unavailable for now", 10*time.Second) || !d.log.waitFor("backends_ready=native ", 10*time.Second) {
		t.Errorf("the start log does not say gvisor is not ready:\n%s", d.log)
	}
	if b := health(); !slices.Equal(b, []string{"native"}) {
		t.Errorf("healthz backends before runsc: %v, want [native]", b)
	}
	out, errOut, code := d.cli(t, "", "version")
	if code != 0 || !strings.Contains(out, "backends ready: native\n") {
		t.Errorf("warden version before runsc: %d %q %q", code, out, errOut)
	}
	out, errOut, code = d.cli(t, "", "sandbox", "create", "--isolation", "gvisor")
	if code == 0 || !strings.Contains(errOut, `isolation "gvisor" is not available`) {
		t.Fatalf("gvisor create without runsc: code %d, %q %q", code, out, errOut)
	}
	out, errOut, code = d.cli(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("native create without runsc: %d %q", code, errOut)
	}
	d.cli(t, "", "sandbox", "kill", strings.TrimSpace(out))

	// runsc appears: the next gvisor create finds it (no restart).
	if err := os.Symlink(runsc, filepath.Join(late, "runsc")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = d.cli(t, "", "sandbox", "create", "--isolation", "gvisor")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("gvisor create once runsc is there: %d %q\n%s", code, errOut, d.log)
	}
	defer d.cli(t, "", "sandbox", "kill", id)
	if out, errOut, code = d.cli(t, "", "sandbox", "inspect", id, "--json"); code != 0 || !strings.Contains(out, `"backend": "gvisor"`) {
		t.Fatalf("inspect %s: %d %q %q", id, code, out, errOut)
	}
	if out, errOut, code = d.cli(t, "", "exec", id, "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("exec in the late gvisor sandbox: %d %q %q", code, out, errOut)
	}
	if !d.log.waitFor("the gvisor backend is ready", 10*time.Second) {
		t.Errorf("the log does not say gvisor became ready:\n%s", d.log)
	}
	if b := health(); !slices.Equal(b, []string{"native", "gvisor"}) {
		t.Errorf("healthz backends after runsc: %v, want [native gvisor]", b)
	}
	if out, errOut, code = d.cli(t, "", "version"); code != 0 || !strings.Contains(out, "backends ready: native, gvisor\n") {
		t.Errorf("warden version after runsc: %d %q %q", code, out, errOut)
	}
}
