package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// debianCache keeps the debootstrapped rootfs between runs on one machine:
// making it downloads about 50 MB from Debian's mirror (a minute or two).
const debianCache = "/var/cache/warden-tests/debian-bookworm-minbase.tar"

// debianRootfs returns a tar of a minimal Debian 12 root filesystem made
// with debootstrap from apt (scripts/install-deps.sh installs debootstrap).
func debianRootfs(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat(debianCache); err == nil && st.Size() > 50<<20 {
		return debianCache
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatal("debootstrap is not installed: run scripts/install-deps.sh")
	}
	dir := filepath.Join(t.TempDir(), "rootfs")
	start := time.Now()
	out, err := exec.Command("debootstrap", "--variant=minbase", "bookworm", dir, "http://deb.debian.org/debian").CombinedOutput()
	if err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, out[max(0, len(out)-2000):])
	}
	t.Logf("debootstrap took %s", time.Since(start).Round(time.Second))
	os.MkdirAll(filepath.Dir(debianCache), 0o755)
	tmp := debianCache + ".tmp"
	if out, err := exec.Command("tar", "-C", dir, "--numeric-owner", "--xattrs", "-cf", tmp, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar rootfs: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, debianCache); err != nil {
		t.Fatal(err)
	}
	return debianCache
}

// TestDebianImage imports a real Debian root filesystem as an image, runs
// its own tools, and builds on it with a Dockerfile whose RUN needs root's
// build capabilities (useradd writes /etc/shadow, chown).
func TestDebianImage(t *testing.T) {
	rootfs := debianRootfs(t)
	layer, err := tarball.LayerFromFile(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	cf.Config.Cmd = []string{"bash"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "debian.tar")
	tag, _ := name.NewTag("debian:bookworm-minbase")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}

	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.ImportArchive(ctxT(t), warden.ArchiveImport{Name: "debian:12"}, f, nil); err != nil {
		t.Fatal(err)
	}
	sh := func(tmpl, script string) string {
		t.Helper()
		sb := create(t, c, warden.CreateSandboxRequest{Template: tmpl})
		defer c.KillSandbox(ctxT(t), sb.ID)
		var o, e bytes.Buffer
		res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"/bin/bash", "-c", script}}, warden.ExecIO{Stdout: &o, Stderr: &e})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %q: %v exit %d\n%s%s", tmpl, script, err, res.ExitCode, o.String(), e.String())
		}
		return strings.TrimSpace(o.String())
	}
	got := sh("debian:12", `cut -d. -f1 /etc/debian_version; dpkg-query -W -f='${Status}\n' bash; apt-get --version | head -1 | cut -d' ' -f1; id -un; test -c /dev/null && echo devnull-ok`)
	if got != "12\ninstall ok installed\napt\nroot\ndevnull-ok" {
		t.Errorf("Debian tools in the imported template: %q", got)
	}

	ctxDir := writeContext(t, map[string]string{"Dockerfile": `FROM debian:12
RUN useradd -m -s /bin/bash app \
 && echo hi > /home/app/hello && chown app:app /home/app/hello
USER app
WORKDIR /home/app
`})
	var logs strings.Builder
	if _, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "debian-app"}, tarDir(t, ctxDir), func(ev warden.TemplateEvent) {
		logs.WriteString(ev.Type + " " + ev.Text + "\n")
	}); err != nil {
		t.Fatalf("%v\nbuild log:\n%s", err, logs.String())
	}
	got = sh("debian-app", `id -un; pwd; stat -c '%U %a' hello; getent passwd app | cut -d: -f6,7`)
	if got != "app\n/home/app\napp 644\n/home/app:/bin/bash" {
		t.Errorf("template built on Debian: %q", got)
	}
}
