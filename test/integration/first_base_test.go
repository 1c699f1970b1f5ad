package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestFirstBaseApt: the base template has working apt sources, keys and
// package database, so a Dockerfile FROM base can apt-get install a package
// the host lacks (with build networking allowlisted to Debian's mirror), and
// a sandbox from the result runs it. The base's /usr is a pinned snapshot
// that build steps write through an overlay, never into the shared inodes.
func TestFirstBaseApt(t *testing.T) {
	const pkg, bin = "figlet", "/usr/bin/figlet"
	if _, err := os.Stat(bin); err == nil {
		t.Fatalf("the host has %s installed: the test needs a package it lacks", bin)
	}
	const probe = "/usr/share/common-licenses/GPL-3" // chmod'ed in a build step
	before, err := os.Stat(probe)
	if err != nil {
		t.Fatalf("host file the test chmods in a sandbox: %v", err)
	}
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)

	// warden template inspect base: the pinned /usr and the package list.
	out, errOut, code := d.cli(t, "", "template", "inspect", "base")
	if code != 0 {
		t.Fatalf("warden template inspect base: %d\n%s%s", code, out, errOut)
	}
	var in struct {
		ID       string `json:"id"`
		Manifest struct {
			Layers []struct{ Target, ID string }
			Labels map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	version := strings.TrimPrefix(in.ID, "base:")
	if len(in.Manifest.Layers) != 2 || in.Manifest.Layers[1].ID != "base-usr:"+version ||
		!strings.Contains(in.Manifest.Labels["warden.base.packages"], "installed") ||
		strings.HasPrefix(in.Manifest.Labels["warden.base.packages"], "0 ") {
		t.Errorf("inspect base: layers %+v labels %v; want the pinned base-usr:%s and a package count", in.Manifest.Layers, in.Manifest.Labels, version)
	}
	snap := filepath.Join(state, "templates", "base", version, "usr")

	dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nUSER root\n" +
		"RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + pkg + "\n" +
		"RUN chmod 600 " + probe + "\n" +
		"USER user\n"})
	out, errOut, code = d.cli(t, "", "template", "build", "-t", "withpkg:1", "--network", "allowlist",
		"--allow", "deb.debian.org,security.debian.org", dir)
	if code != 0 {
		t.Fatalf("warden template build FROM base with apt-get install: %d\n%s%s", code, out, errOut)
	}

	sb := create(t, c, warden.CreateSandboxRequest{Template: "withpkg:1"})
	defer c.KillSandbox(ctxT(t), sb.ID)
	var o, e bytes.Buffer
	res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", pkg + " hi; stat -c %a " + probe}}, warden.ExecIO{Stdout: &o, Stderr: &e})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s in a sandbox from the built template: %v exit %d\n%s%s", pkg, err, res.ExitCode, o.String(), e.String())
	}
	if !strings.Contains(o.String(), "|_|") || !strings.HasSuffix(strings.TrimSpace(o.String()), "600") {
		t.Errorf("%s output / chmod in the build: %q", pkg, o.String())
	}

	// The build wrote /usr through its own layer: neither the host's /usr
	// nor the base's snapshot (which shares the host's inodes) changed.
	for _, p := range []string{probe, filepath.Join(snap, strings.TrimPrefix(probe, "/usr/"))} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != before.Mode() {
			t.Errorf("%s after the build: %v %v, want mode %v", p, fi.Mode(), err, before.Mode())
			if strings.HasPrefix(p, "/usr/") && err == nil {
				os.Chmod(p, before.Mode())
			}
		}
	}
	if _, err := os.Stat(filepath.Join(snap, "bin", pkg)); err == nil {
		t.Error("the package was installed into the base's /usr snapshot")
	}
	// And a sandbox from base does not see it.
	sb2 := create(t, c, warden.CreateSandboxRequest{Template: "base"})
	defer c.KillSandbox(ctxT(t), sb2.ID)
	o.Reset()
	res, err = c.Exec(ctxT(t), sb2.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", "test -e " + bin + " && echo leaked || echo absent"}}, warden.ExecIO{Stdout: &o})
	if err != nil || strings.TrimSpace(o.String()) != "absent" {
		t.Errorf("base after the build: %q %v", o.String(), err)
	}
}
