package backendtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
)

// sudoPath is where backends mount the sandbox's sudo program (package
// internal/agent/sudo, ShimPath).
const sudoPath = "/usr/local/bin/sudo"

// Sudo checks how a backend gives a sandbox with Spec.Sudo its sudo
// program: a read-only bind mount of the agent binary at
// /usr/local/bin/sudo, not a copy in the writable layer. The sandbox's
// root can neither write nor unmount it; the writable layer does not grow
// by the binary's size; a template whose /usr/local/bin is a symlink gets
// no sudo (never a mount through the link) and still starts; a template's
// own /usr/local/bin/sudo is covered while sudo is on and is the template's
// again with sudo off. Backends whose sandboxes run with no root
// filesystem of their own (Unconfined) have no such mount.
func Sudo(t *testing.T, f Factory) {
	if f.Unconfined {
		t.Skip("SKIP: an unconfined backend has no root filesystem to mount sudo in")
	}
	b := f.New(t)
	on := func(sp *backend.Spec) { sp.Sudo = true }
	t.Run("BindMount", func(t *testing.T) {
		s := Start(t, f, b, on)
		// Listed in the mount table, read-only, nosuid, nodev.
		mi := s.Sh(t, "root", `grep " `+sudoPath+` " /proc/self/mountinfo || true`)
		fields := strings.Fields(mi)
		if len(fields) < 6 {
			t.Fatalf("%s is not a mount point (a copy in the writable layer?); mountinfo line: %q", sudoPath, mi)
		}
		opts := "," + fields[5] + ","
		for _, o := range []string{",ro,", ",nosuid,", ",nodev,"} {
			if !strings.Contains(opts, o) {
				t.Errorf("%s mount options %s, want ro, nosuid and nodev", sudoPath, fields[5])
			}
		}
		// No host path shows (the mount's root is its source's path in its
		// filesystem).
		if f.HostPaths != nil {
			for _, p := range f.HostPaths(t, s.H) {
				if strings.Contains(mi, p) {
					t.Errorf("%s mountinfo line shows host path %s: %q", sudoPath, p, mi)
				}
			}
		}
		// It works, for the default user.
		if got := strings.TrimSpace(s.Sh(t, "user", "sudo id -u")); got != "0" {
			t.Errorf("sudo id -u = %q, want 0", got)
		}
		// The sandbox's root can neither write it, nor remove it, nor unmount it.
		for _, c := range []string{
			"touch " + sudoPath,
			"echo x >> " + sudoPath,
			"chmod 777 " + sudoPath,
			"rm -f " + sudoPath,
			"umount " + sudoPath,
			"umount -l " + sudoPath,
			"sudo umount " + sudoPath,
			"sudo sh -c 'echo x >> " + sudoPath + "'",
		} {
			out, errb, res := s.Exec(t, "root", "/bin/sh", "-c", c)
			if res.ExitCode == 0 {
				t.Errorf("as root, %q succeeded (stdout %q, stderr %q); want it refused", c, out, errb)
			}
		}
		if mi2 := s.Sh(t, "root", `grep -c " `+sudoPath+` " /proc/self/mountinfo || true`); strings.TrimSpace(mi2) != "1" {
			t.Errorf("%s mounts after the attempts: %s, want 1", sudoPath, mi2)
		}
		if got := strings.TrimSpace(s.Sh(t, "user", "sudo id -u")); got != "0" {
			t.Errorf("sudo id -u after the attempts = %q, want 0", got)
		}
	})
	t.Run("WritableLayer", func(t *testing.T) {
		// The writable layer of a sandbox with sudo holds no more than one
		// without: the binary (megabytes) is not in it.
		used := func(s *Sandbox) int64 {
			out := s.Sh(t, "root", `df -P -k / | tail -n 1`)
			fs := strings.Fields(out)
			if len(fs) < 3 {
				t.Fatalf("df /: %q", out)
			}
			n, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				t.Fatalf("df /: %q: %v", out, err)
			}
			return n << 10
		}
		with := Start(t, f, b, on)
		without := Start(t, f, b, nil)
		size, err := strconv.ParseInt(strings.TrimSpace(with.Sh(t, "root", "stat -L -c %s "+sudoPath)), 10, 64)
		if err != nil || size < 1<<20 {
			t.Fatalf("size of %s: %d, %v; want the agent binary (megabytes)", sudoPath, size, err)
		}
		u1, u0 := used(with), used(without)
		if u1-u0 >= size/2 {
			t.Errorf("writable layer with sudo uses %d bytes, without %d: it grew by about the agent's size (%d)", u1, u0, size)
		}
		if out, _, res := without.Exec(t, "root", "/bin/sh", "-c", "test -e "+sudoPath+" && grep ' "+sudoPath+" ' /proc/self/mountinfo"); res.ExitCode == 0 {
			t.Errorf("a sandbox without sudo has %s mounted: %s", sudoPath, out)
		}
	})
	t.Run("TemplateSymlink", func(t *testing.T) {
		// /usr/local/bin a symlink to /etc: no mount through it, no sudo.
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "usr", "local"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc", filepath.Join(dir, "usr", "local", "bin")); err != nil {
			t.Fatal(err)
		}
		s := Start(t, f, b, func(sp *backend.Spec) {
			sp.Sudo = true
			sp.Layers = append([]backend.Layer{usrLayer(sp, dir)}, sp.Layers...)
		})
		out := s.Sh(t, "root", `readlink /usr/local/bin; test -e /etc/sudo && echo planted; grep -c sudo /proc/self/mountinfo || true`)
		if out != "/etc\n0\n" {
			t.Errorf("template with /usr/local/bin -> /etc and sudo on: got %q, want the link kept, nothing at /etc/sudo and no sudo mount", out)
		}
	})
	t.Run("TemplateOwnSudo", func(t *testing.T) {
		// The template's own /usr/local/bin/sudo: covered while sudo is on.
		dir := t.TempDir()
		bin := filepath.Join(dir, "usr", "local", "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "sudo"), []byte("#!/bin/sh\necho template-sudo\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		layer := func(sudo bool) func(sp *backend.Spec) {
			return func(sp *backend.Spec) {
				sp.Sudo = sudo
				sp.Layers = append([]backend.Layer{usrLayer(sp, dir)}, sp.Layers...)
			}
		}
		if got := Start(t, f, b, layer(true)).Sh(t, "user", "sudo id -u"); got != "0\n" {
			t.Errorf("sudo on over a template's own sudo: %q, want 0 (Warden's)", got)
		}
		if got := Start(t, f, b, layer(false)).Sh(t, "user", "sudo id -u"); got != "template-sudo\n" {
			t.Errorf("sudo off: %q, want the template's own", got)
		}
	})
}

// usrLayer returns a top layer for sp made of dir (a root tree holding
// usr/...): at "/usr" (dir/usr) when the template has a layer there (the
// base template shares the host's /usr), else at "/".
func usrLayer(sp *backend.Spec, dir string) backend.Layer {
	for _, l := range sp.Layers {
		if filepath.Clean(l.Target) == "/usr" {
			return backend.Layer{Target: "/usr", Path: filepath.Join(dir, "usr")}
		}
	}
	return backend.Layer{Target: "/", Path: dir}
}
