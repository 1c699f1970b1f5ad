package integration

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// imageTool is a static program that exists only in the test images: it
// greets, and reports on paths so the test can see whiteouts from inside a
// sandbox without a shell in the image.
const imageTool = `package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "ls" {
		ents, err := os.ReadDir(os.Args[2])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		for _, e := range ents {
			fmt.Println(e.Name())
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "cat" {
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		return
	}
	fmt.Println("hello from the image")
}
`

// buildImageTool compiles imageTool statically.
func buildImageTool(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(imageTool), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module imagetool\n\ngo 1.22\n"), 0o644)
	cmd := exec.Command("go", "build", "-o", "tool", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build image tool: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tool"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       []byte
}

func layerOf(t *testing.T, ents ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	tw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is two layers: the tool (with a hardlink and a symlink to it),
// files to remove, and a directory to make opaque; then a layer with a
// whiteout and an opaque marker.
func testImage(t *testing.T, tool []byte) v1.Image {
	l1 := layerOf(t,
		entry{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/local/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/local/bin/image-tool", typ: tar.TypeReg, mode: 0o755, body: tool},
		entry{name: "usr/local/bin/tool-hardlink", typ: tar.TypeLink, link: "usr/local/bin/image-tool"},
		entry{name: "usr/local/bin/tool-symlink", typ: tar.TypeSymlink, link: "image-tool"},
		entry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "etc/keep", typ: tar.TypeReg, mode: 0o644, body: []byte("kept\n")},
		entry{name: "etc/gone", typ: tar.TypeReg, mode: 0o644, body: []byte("should be whited out\n")},
		entry{name: "data/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "data/old", typ: tar.TypeReg, mode: 0o644, body: []byte("old\n")},
	)
	l2 := layerOf(t,
		entry{name: "etc/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		entry{name: "data/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "data/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		entry{name: "data/new", typ: tar.TypeReg, mode: 0o644, body: []byte("new\n")},
	)
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE_VAR=from-config"}
	cf.Config.WorkingDir = "/data"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// checkImageSandbox boots a sandbox from tmpl and checks the image's
// content as a process inside sees it.
func checkImageSandbox(t *testing.T, c *warden.Client, tmpl string) {
	t.Helper()
	sb := create(t, c, warden.CreateSandboxRequest{Template: tmpl})
	defer c.KillSandbox(ctxT(t), sb.ID)
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: args}, warden.ExecIO{Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v in %s: %v exit %d\n%s%s", args, tmpl, err, res.ExitCode, out.String(), errb.String())
		}
		return out.String()
	}
	if got := run("image-tool"); got != "hello from the image\n" {
		t.Errorf("image-tool says %q", got)
	}
	if got := run("/usr/local/bin/tool-hardlink"); got != "hello from the image\n" {
		t.Errorf("hardlink says %q", got)
	}
	if got := run("tool-symlink"); got != "hello from the image\n" {
		t.Errorf("symlink says %q", got)
	}
	if got := run("image-tool", "ls", "/etc"); !strings.Contains(got, "keep") || strings.Contains(got, "gone") {
		t.Errorf("/etc holds %q: want keep, and gone whited out", got)
	}
	if got := run("image-tool", "ls", "/data"); got != "new\n" {
		t.Errorf("/data (opaque in layer 2) holds %q, want only new", got)
	}
	if got := run("image-tool", "cat", "/proc/self/environ"); !strings.Contains(got, "IMAGE_VAR=from-config") {
		t.Errorf("environment lacks the image's IMAGE_VAR: %q", got)
	}
	if got := run("image-tool", "ls", "."); got != "new\n" {
		t.Errorf("working directory is not the image's /data: ls . = %q", got)
	}
}

func TestTemplates(t *testing.T) {
	state, run := newDirs(t)
	// The test registry is on loopback: wardend pulls from it only because
	// the configuration allows it (over plain HTTP).
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	d := startDaemon(t, state, run, allowRegistries(t, strings.TrimPrefix(reg.URL, "http://"))...)
	c := d.client(t, d.adminKey)
	tool := buildImageTool(t)
	img := testImage(t, tool)

	t.Run("ImportRegistry", func(t *testing.T) {
		ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://")+"/warden/tool:1", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		var events int
		tm, err := c.ImportTemplate(ctxT(t), warden.ImportRequest{Name: "tool:reg", Image: ref.String(), Insecure: true},
			func(warden.TemplateEvent) { events++ })
		if err != nil {
			t.Fatal(err)
		}
		if tm.Layers != 2 || events == 0 {
			t.Errorf("import: %d layers, %d progress events", tm.Layers, events)
		}
		checkImageSandbox(t, c, "tool:reg")
	})

	t.Run("ImportOCILayout", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "layout")
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := d.cli(t, "", "template", "import", dir, "-t", "tool:oci")
		if code != 0 {
			t.Fatalf("warden template import (OCI layout): %d\n%s%s", code, out, errOut)
		}
		checkImageSandbox(t, c, "tool:oci")
	})

	t.Run("ImportDockerArchive", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "image.tar")
		tag, _ := name.NewTag("example.com/tool:1")
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := d.cli(t, "", "template", "import", path, "-t", "tool:docker")
		if code != 0 {
			t.Fatalf("warden template import (docker save): %d\n%s%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "layer 1/2") {
			t.Errorf("import printed no per-layer progress lines: %q", errOut)
		}
		checkImageSandbox(t, c, "tool:docker")
		// The three imports share their layers.
		u, err := c.TemplateDiskUsage(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if u.Layers != 2 {
			t.Errorf("store holds %d layers after three imports of one image, want 2 (shared)", u.Layers)
		}
	})

	t.Run("ImportProgressLines", func(t *testing.T) {
		// Fresh layers (nothing stored yet), imported through the CLI
		// without a terminal: one line per phase, named as a person reads
		// it, then the layer's size, time and rate.
		body := make([]byte, 256<<10)
		if _, err := rand.Read(body); err != nil {
			t.Fatal(err)
		}
		fresh, err := mutate.AppendLayers(img, layerOf(t, entry{name: "fresh.bin", typ: tar.TypeReg, mode: 0o644, body: body}))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "fresh.tar")
		tag, _ := name.NewTag("example.com/fresh:1")
		if err := tarball.WriteToFile(path, tag, fresh); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := d.cli(t, "", "template", "import", path, "-t", "tool:fresh")
		if code != 0 {
			t.Fatalf("warden template import: %d\n%s%s", code, out, errOut)
		}
		for _, re := range []string{
			`(?m)^layer 1/3 [0-9a-f]{12}: already stored$`,
			`(?m)^layer 3/3 [0-9a-f]{12}: extracting [0-9.]+ KiB$`,
			`(?m)^layer 3/3 [0-9a-f]{12}: verifying [0-9.]+ KiB$`,
			`(?m)^layer 3/3 [0-9a-f]{12}: [0-9.]+ KiB read and extracted in [0-9]+\.[0-9] s( \([0-9.]+ (B|KiB|MiB|GiB)/s\))?$`,
		} {
			if !regexp.MustCompile(re).MatchString(errOut) {
				t.Errorf("import progress has no line matching %s:\n%s", re, errOut)
			}
		}
		if strings.Contains(errOut, ": download ") || strings.Contains(errOut, ": extract ") {
			t.Errorf("import progress uses the wire phase names:\n%s", errOut)
		}
		// Its own layer goes at once; the two it shares stay with tool:docker
		// (RemoveAndGC counts them).
		if err := c.DeleteTemplate(ctxT(t), "tool:fresh"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GCTemplates(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TraversalRefused", func(t *testing.T) {
		bad, err := mutate.AppendLayers(empty.Image, layerOf(t,
			entry{name: "ok", typ: tar.TypeReg, mode: 0o644, body: []byte("ok")},
			entry{name: "../../../../../../../tmp/warden-escape", typ: tar.TypeReg, mode: 0o644, body: []byte("escaped")},
		))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "bad.tar")
		tag, _ := name.NewTag("example.com/bad:1")
		if err := tarball.WriteToFile(path, tag, bad); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(path)
		defer f.Close()
		_, err = c.ImportArchive(ctxT(t), warden.ArchiveImport{Name: "bad"}, f, nil)
		var we *warden.Error
		if !errors.As(err, &we) || we.Code != "validation_failed" || !strings.Contains(we.Message, "..") {
			t.Fatalf("import of a traversal layer: %v, want a validation_failed error naming the entry", err)
		}
		if _, err := os.Stat("/tmp/warden-escape"); err == nil {
			os.Remove("/tmp/warden-escape")
			t.Fatal("a layer entry was written outside the layer")
		}
		if _, err := c.GetTemplate(ctxT(t), "bad"); err == nil {
			t.Error("a refused import left a template behind")
		}
	})

	t.Run("Build", func(t *testing.T) { testBuild(t, d, c) })
	t.Run("StartCommand", func(t *testing.T) { testStartCommand(t, d, c) })
	t.Run("RemoveAndGC", func(t *testing.T) {
		for _, n := range []string{"tool:reg", "tool:oci"} {
			if err := c.DeleteTemplate(ctxT(t), n); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.GCTemplates(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// The layers tool:docker shares with the removed names survive.
		checkImageSandbox(t, c, "tool:docker")
		before, err := c.TemplateDiskUsage(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteTemplate(ctxT(t), "tool:docker"); err != nil {
			t.Fatal(err)
		}
		rep, err := c.GCTemplates(ctxT(t))
		after, _ := c.TemplateDiskUsage(ctxT(t))
		if err != nil || rep.Layers != 2 || after.Layers != before.Layers-2 {
			t.Errorf("gc after removing the image's last name: %+v, %v; layers %d -> %d; want its 2 layers removed", rep, err, before.Layers, after.Layers)
		}
		if _, err := c.GetTemplate(ctxT(t), "myapp:1"); err != nil {
			t.Errorf("gc touched a built template: %v", err)
		}
		if err := c.DeleteTemplate(ctxT(t), "base"); err == nil {
			t.Error("the built-in base template was removable")
		}
	})
}

// writeContext writes a build context.
func writeContext(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, body := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const buildDockerfile = `# a template built on Warden's base
FROM base
USER root
ENV GREETING=hello
ARG FLAVOR=plain
WORKDIR /app
COPY app.sh ./
COPY conf/ /etc/myapp/
RUN chmod 755 /app/app.sh \
 && mkdir -p /opt/data \
 && echo "$GREETING from the build ($FLAVOR)" > /opt/data/msg \
 && chown user:user /opt/data/msg \
 && rm /etc/os-release
USER user
RUN echo VERSION > /home/user/version
`

func testBuild(t *testing.T, d *daemon, c *warden.Client) {
	dir := writeContext(t, map[string]string{
		"Dockerfile":     buildDockerfile,
		"app.sh":         "#!/bin/sh\necho \"app says: $(cat /opt/data/msg)\"\n",
		"conf/app.conf":  "level=debug\n",
		"ignored/secret": "do not send\n",
		".dockerignore":  "ignored\n",
	})
	out, errOut, code := d.cli(t, "", "template", "build", "-t", "myapp:1", "--build-arg", "FLAVOR=spicy", "--json", dir)
	if code != 0 {
		t.Fatalf("warden template build: %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "Step 6/10") {
		t.Errorf("build printed no step lines: %q", errOut)
	}
	sb := create(t, c, warden.CreateSandboxRequest{Template: "myapp:1"})
	defer c.KillSandbox(ctxT(t), sb.ID)
	sh := func(script string) string {
		t.Helper()
		var o, e bytes.Buffer
		res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o, Stderr: &e})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v exit %d\n%s%s", script, err, res.ExitCode, o.String(), e.String())
		}
		return strings.TrimSpace(o.String())
	}
	if got := sh("./app.sh"); got != "app says: hello from the build (spicy)" {
		t.Errorf("app.sh in the built template: %q", got)
	}
	if got := sh("id -un; pwd; echo $GREETING; cat /etc/myapp/app.conf; stat -c %U /opt/data/msg; cat ~/version"); got != "user\n/app\nhello\nlevel=debug\nuser\nVERSION" {
		t.Errorf("user, workdir, env, COPY of a directory, ownership, a step as USER: %q", got)
	}
	if got := sh("test -e /etc/os-release && echo present || echo removed; test -e /app/ignored && echo sent || echo ignored"); got != "removed\nignored" {
		t.Errorf("removal in a RUN step, .dockerignore: %q", got)
	}

	// One changed late line: every step before it comes from the cache.
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(strings.Replace(buildDockerfile, "echo VERSION", "echo VERSION2", 1)), 0o644)
	f := tarDir(t, dir)
	var cached []int
	res, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "myapp:2", Args: map[string]string{"FLAVOR": "spicy"}}, f,
		func(ev warden.TemplateEvent) {
			if ev.Type == "cached" {
				cached = append(cached, ev.Line)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	// The file steps before the change: WORKDIR (line 6), COPY (7, 8), RUN (9).
	if res.CacheHits != 4 || res.Executed != 1 || fmt.Sprint(cached) != "[6 7 8 9]" {
		t.Errorf("rebuild with the last RUN changed: %d cache hits on lines %v, %d executed; want 4 hits (lines 6-9) and 1 run", res.CacheHits, cached, res.Executed)
	}

	// Errors name the Dockerfile line.
	bad := writeContext(t, map[string]string{"Dockerfile": "FROM base\nUSER root\nRUN echo ok\nRUN exit 7\n"})
	_, err = c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "bad"}, tarDir(t, bad), nil)
	var we *warden.Error
	if !errors.As(err, &we) || !strings.Contains(we.Message, "Dockerfile:4") || !strings.Contains(we.Message, "exit code 7") {
		t.Errorf("failing RUN: %v, want an error naming Dockerfile:4 and exit code 7", err)
	}
	// RUN steps have no network unless the build asks for one.
	netDir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nRUN grep -q wd0 /proc/net/dev && grep -q 10.254.0.1 /etc/resolv.conf\n"})
	if _, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "netless"}, tarDir(t, netDir), nil); err == nil {
		t.Error("a RUN step without --network found a network device")
	}
	if _, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "networked", Network: "allowlist", Allow: []string{"deb.debian.org"}}, tarDir(t, netDir), nil); err != nil {
		t.Errorf("a RUN step with an allowlist network: %v", err)
	}
	bad = writeContext(t, map[string]string{"Dockerfile": "FROM base\nFROBNICATE x\n"})
	_, err = c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "bad"}, tarDir(t, bad), nil)
	if !errors.As(err, &we) || !strings.Contains(we.Message, "Dockerfile:2") {
		t.Errorf("unknown instruction: %v, want an error naming Dockerfile:2", err)
	}
}

// tarDir returns dir as a tar stream.
func tarDir(t *testing.T, dir string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, _ := tar.FileInfoHeader(fi, "")
		hdr.Name = rel
		tw.WriteHeader(hdr)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			tw.Write(b)
		}
		return nil
	})
	tw.Close()
	return &buf
}

func testStartCommand(t *testing.T, d *daemon, c *warden.Client) {
	build := func(name, dockerfile string) {
		t.Helper()
		if _, err := c.BuildTemplate(ctxT(t), warden.BuildRequest{Name: name}, tarDir(t, writeContext(t, map[string]string{"Dockerfile": dockerfile})), nil); err != nil {
			t.Fatalf("build %s: %v", name, err)
		}
	}
	// Ready by command: creation returns only once the check passes.
	build("starter", "FROM base\nCMD [\"/bin/sh\", \"-c\", \"sleep 0.3; echo up > /tmp/ready; exec sleep 1000\"]\nHEALTHCHECK --interval=50ms CMD test -f /tmp/ready\n")
	sb := create(t, c, warden.CreateSandboxRequest{Template: "starter"})
	var o bytes.Buffer
	res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"cat", "/tmp/ready"}}, warden.ExecIO{Stdout: &o})
	if err != nil || res.ExitCode != 0 || o.String() != "up\n" {
		t.Errorf("sandbox returned before its ready check passed: %v exit %d %q", err, res.ExitCode, o.String())
	}
	c.KillSandbox(ctxT(t), sb.ID)

	// Ready by port: a web server in the sandbox.
	build("web", "FROM base\nLABEL warden.ready.port=8080\nCMD python3 -m http.server 8080 --bind 127.0.0.1\n")
	sb = create(t, c, warden.CreateSandboxRequest{Template: "web"})
	o.Reset()
	res, err = c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/').status)"}}, warden.ExecIO{Stdout: &o})
	if err != nil || res.ExitCode != 0 || o.String() != "200\n" {
		t.Errorf("port-ready web server: %v exit %d %q", err, res.ExitCode, o.String())
	}
	c.KillSandbox(ctxT(t), sb.ID)

	// A start command that dies: creation fails with its output.
	build("crasher", "FROM base\nCMD [\"/bin/sh\", \"-c\", \"echo missing config file >&2; exit 3\"]\nHEALTHCHECK CMD true && false\n")
	_, err = c.CreateSandbox(ctxT(t), warden.CreateSandboxRequest{Template: "crasher"})
	var we *warden.Error
	if !errors.As(err, &we) || we.Code != "validation_failed" || !strings.Contains(we.Message, "missing config file") {
		t.Errorf("crashing start command: %v, want validation_failed with its output", err)
	}
}
