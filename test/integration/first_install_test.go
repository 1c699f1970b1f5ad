package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFirstInstall: `wardend install` writes a systemd unit that runs this
// wardend with the given flags (checked at install time), that systemd
// accepts (systemd-analyze verify) and that leaves sandboxes running when the
// service stops; `wardend uninstall` removes it. Nothing is enabled: systemd
// need not be the init system here.
func TestFirstInstall(t *testing.T) {
	wardend := filepath.Join(binDir, "wardend")
	unit := filepath.Join(t.TempDir(), "wardend.service")
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(wardend, args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return o.String(), e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}

	// Bad service flags: refused, nothing written.
	if _, errOut, code := run("install", "--unit", unit, "--", "--backend", "nope"); code != 2 || !strings.Contains(errOut, `unknown backend "nope"`) {
		t.Fatalf("install with a bad flag: code %d, %q", code, errOut)
	}
	if _, err := os.Stat(unit); err == nil {
		t.Fatal("a refused install wrote the unit")
	}

	out, errOut, code := run("install", "--unit", unit, "--", "--state-dir", "/srv/warden state", "--listen", "127.0.0.1:7171")
	if code != 0 || !strings.Contains(out, "wrote "+unit) || !strings.Contains(out, "systemctl enable --now wardend.service") {
		t.Fatalf("install: code %d, %q %q", code, out, errOut)
	}
	raw, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(unit)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("unit mode %v, want 0644", fi.Mode().Perm())
	}
	text := string(raw)
	for _, want := range []string{
		"\nExecStart=" + wardend + ` --state-dir "/srv/warden state" --listen 127.0.0.1:7171` + "\n",
		"\nKillMode=process\n", "\nRestart=on-failure\n", "\nWantedBy=multi-user.target\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q:\n%s", want, text)
		}
	}
	// systemd's own parser accepts it.
	verify := exec.Command("systemd-analyze", "verify", unit)
	verify.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_LEVEL=warning"}
	vout, err := verify.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify %s: %v\n%s\n%s", unit, err, vout, text)
	}
	for _, line := range strings.Split(string(vout), "\n") {
		if strings.Contains(line, "wardend.service") {
			t.Errorf("systemd-analyze verify complains about the unit: %s", line)
		}
	}

	if out, errOut, code = run("uninstall", "--unit", unit); code != 0 || !strings.Contains(out, "removed "+unit) {
		t.Fatalf("uninstall: code %d, %q %q", code, out, errOut)
	}
	if _, err := os.Stat(unit); err == nil {
		t.Fatal("uninstall left the unit")
	}
	if out, _, code = run("uninstall", "--unit", unit); code != 0 || !strings.Contains(out, "not installed") {
		t.Fatalf("second uninstall: code %d, %q", code, out)
	}
}
