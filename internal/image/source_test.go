package image

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var testConfig = v1.Config{
	Env:          []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
	User:         "1000:1000",
	WorkingDir:   "/home/alice",
	Entrypoint:   []string{"/bin/sh", "-c"},
	Cmd:          []string{"echo hello"},
	ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}},
	Labels:       map[string]string{"org.example.role": "test"},
}

// withPlatform sets os/arch in the config file of img.
func withPlatform(t testing.TB, img v1.Image, os, arch, variant string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = os, arch, variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testImage is the crafted two-layer image (layer1 bottom, layer2 top).
func testImage(t testing.TB) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, layer1()...), tarLayer(t, layer2()...))
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	return withPlatform(t, img, "linux", "amd64", "")
}

// randomImage is a small image of random layers for the given platform.
func randomImage(t testing.TB, os, arch string) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	return withPlatform(t, img, os, arch, "")
}

func digestOf(t testing.TB, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newRegistry serves an in-memory registry over plain HTTP, optionally
// behind wrap, and returns its host:port.
func newRegistry(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	testHosts.Lock()
	testHosts.list = append(testHosts.list, host)
	testHosts.Unlock()
	return host
}

// testHosts are the registries newRegistry started: local, so refused by the
// default policy.
var testHosts struct {
	sync.Mutex
	list []string
}

// local returns a policy that allows every registry newRegistry started,
// over plain HTTP.
func local(t testing.TB) *Policy {
	t.Helper()
	testHosts.Lock()
	defer testHosts.Unlock()
	var regs []Registry
	for _, h := range testHosts.list {
		regs = append(regs, Registry{Host: h, Insecure: true})
	}
	p, err := NewPolicy(regs, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func push(t testing.TB, ref string, img v1.Image, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func multiPlatformIndex(t testing.TB, imgs map[string]v1.Image) v1.ImageIndex {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range imgs {
			if !yield(k) {
				return
			}
		}
	})
	for _, plat := range keys {
		p, err := v1.ParsePlatform(plat)
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: imgs[plat], Descriptor: v1.Descriptor{Platform: p}})
	}
	return idx
}

func TestFromRegistry(t *testing.T) {
	ctx := context.Background()
	host := newRegistry(t, nil)
	img := testImage(t)
	push(t, host+"/test/app:v1", img)

	got, err := local(t).FromRegistry(ctx, host+"/test/app:v1", RegistryOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, got) != digestOf(t, img) {
		t.Errorf("pulled digest %s, pushed %s", digestOf(t, got), digestOf(t, img))
	}
	byDigest, err := local(t).FromRegistry(ctx, host+"/test/app@"+digestOf(t, img).String(), RegistryOptions{Insecure: true, Platform: "linux/arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, byDigest) != digestOf(t, img) {
		t.Error("pull by digest returned another image")
	}

	t.Run("platforms", func(t *testing.T) {
		amd, arm := randomImage(t, "linux", "amd64"), randomImage(t, "linux", "arm64")
		armv7 := withPlatform(t, randomImage(t, "linux", "arm"), "linux", "arm", "v7")
		idx := multiPlatformIndex(t, map[string]v1.Image{"linux/amd64": amd, "linux/arm64": arm, "linux/arm/v7": armv7})
		r, _ := name.ParseReference(host+"/test/multi:latest", name.Insecure)
		if err := remote.WriteIndex(r, idx); err != nil {
			t.Fatal(err)
		}
		for plat, want := range map[string]v1.Image{"": amd, "linux/amd64": amd, "linux/arm64": arm, "linux/arm/v7": armv7} {
			got, err := local(t).FromRegistry(ctx, host+"/test/multi:latest", RegistryOptions{Insecure: true, Platform: plat})
			if err != nil {
				t.Fatalf("platform %q: %v", plat, err)
			}
			if digestOf(t, got) != digestOf(t, want) {
				t.Errorf("platform %q: got another image", plat)
			}
		}
		_, err := local(t).FromRegistry(ctx, host+"/test/multi:latest", RegistryOptions{Insecure: true, Platform: "linux/s390x"})
		if err == nil {
			t.Fatal("missing platform accepted")
		}
		t.Log(err)
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			ref  string
			opts RegistryOptions
			want string
		}{
			{host + "/test/app:nope", RegistryOptions{Insecure: true}, "not found"},
			{host + "/test/other:v1", RegistryOptions{Insecure: true}, "not found"},
			{"UPPER/case:v1", RegistryOptions{}, "parse image reference"},
			{host + "/test/app:v1", RegistryOptions{Insecure: true, Platform: "linux"}, "platform"},
			{host + "/test/app:v1", RegistryOptions{Insecure: true, Username: "u", Token: "t"}, "not both"},
		} {
			_, err := local(t).FromRegistry(ctx, c.ref, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %+v: err = %v, want %q", c.ref, c.opts, err, c.want)
			}
		}
	})
}

// requireAuth wraps a registry so every request needs the Authorization
// header check accepts; otherwise it answers 401 with challenge.
func requireAuth(challenge string, check func(r *http.Request) bool, hits *atomic.Int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !check(r) {
				// "PROXY" stands for this server's own host:port.
				w.Header().Set("WWW-Authenticate", strings.ReplaceAll(challenge, "PROXY", r.Host))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			if hits != nil && strings.Contains(r.URL.Path, "/blobs/") {
				hits.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
}

func TestFromRegistryBasicAuth(t *testing.T) {
	requireRoot(t) // imports the crafted layers
	ctx := context.Background()
	var blobHits atomic.Int64
	host := newRegistry(t, requireAuth(`Basic realm="warden-test"`, func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "alice" && p == "s3cret"
	}, &blobHits))
	img := testImage(t)
	push(t, host+"/private/app:v1", img, remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	ref := host + "/private/app:v1"

	_, err := local(t).FromRegistry(ctx, ref, RegistryOptions{Insecure: true})
	if err == nil {
		t.Fatal("pull without credentials succeeded")
	}
	if !strings.Contains(err.Error(), "requires authentication") {
		t.Errorf("unclear error without credentials: %v", err)
	}
	t.Log(err)

	_, err = local(t).FromRegistry(ctx, ref, RegistryOptions{Insecure: true, Username: "alice", Password: "wrong"})
	if err == nil || !strings.Contains(err.Error(), "rejected the credentials") {
		t.Errorf("wrong password: err = %v", err)
	}

	got, err := local(t).FromRegistry(ctx, ref, RegistryOptions{Insecure: true, Username: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, got) != digestOf(t, img) {
		t.Error("pulled another image")
	}
	// Layers are fetched lazily, with the same credentials.
	blobHits.Store(0)
	store := newDirStore(t)
	res, err := Import(ctx, got, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Layers) != 2 || blobHits.Load() < 2 {
		t.Errorf("imported %d layers with %d authenticated blob fetches", len(res.Layers), blobHits.Load())
	}
}

func TestFromRegistryToken(t *testing.T) {
	ctx := context.Background()
	host := newRegistry(t, nil)
	// The token is checked by a second server in front of the same
	// registry contents: push anonymously, pull with a token.
	img := randomImage(t, "linux", "amd64")
	push(t, host+"/tok/app:v1", img)
	// ggcr only accepts a token realm on a private address (127.0.0.1)
	// when it is the registry's own host:port; it is never contacted
	// since the token is given directly.
	proxyHost := newRegistry(t, func(http.Handler) http.Handler {
		target := "http://" + host
		return requireAuth(`Bearer realm="http://`+"PROXY"+`/token",service="warden-test"`, func(r *http.Request) bool {
			return r.Header.Get("Authorization") == "Bearer tok3n"
		}, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), r.Body)
			req.Header = r.Header.Clone()
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		}))
	})
	if _, err := local(t).FromRegistry(ctx, proxyHost+"/tok/app:v1", RegistryOptions{Insecure: true, Token: "bad"}); err == nil {
		t.Error("wrong token accepted")
	}
	got, err := local(t).FromRegistry(ctx, proxyHost+"/tok/app:v1", RegistryOptions{Insecure: true, Token: "tok3n"})
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, got) != digestOf(t, img) {
		t.Error("pulled another image")
	}
}

func TestFromLayout(t *testing.T) {
	amd, arm := randomImage(t, "linux", "amd64"), randomImage(t, "linux", "arm64")

	t.Run("single image any platform", func(t *testing.T) {
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendImage(arm); err != nil {
			t.Fatal(err)
		}
		got, err := FromLayout(dir, "linux/amd64")
		if err != nil {
			t.Fatal(err)
		}
		if digestOf(t, got) != digestOf(t, arm) {
			t.Error("got another image")
		}
	})

	t.Run("platform descriptors", func(t *testing.T) {
		dir := t.TempDir()
		lp, _ := layout.Write(dir, empty.Index)
		lp.AppendImage(amd, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
		lp.AppendImage(arm, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
		for plat, want := range map[string]v1.Image{"": amd, "linux/arm64": arm} {
			got, err := FromLayout(dir, plat)
			if err != nil {
				t.Fatalf("%q: %v", plat, err)
			}
			if digestOf(t, got) != digestOf(t, want) {
				t.Errorf("%q: got another image", plat)
			}
		}
		_, err := FromLayout(dir, "linux/riscv64")
		if err == nil || !strings.Contains(err.Error(), "linux/amd64") || !strings.Contains(err.Error(), "linux/arm64") {
			t.Errorf("missing platform: err = %v, want a list of what is there", err)
		}
		t.Log(err)
	})

	t.Run("platform from config", func(t *testing.T) {
		dir := t.TempDir()
		lp, _ := layout.Write(dir, empty.Index)
		lp.AppendImage(amd)
		lp.AppendImage(arm)
		got, err := FromLayout(dir, "linux/arm64")
		if err != nil {
			t.Fatal(err)
		}
		if digestOf(t, got) != digestOf(t, arm) {
			t.Error("got another image")
		}
	})

	t.Run("nested index", func(t *testing.T) {
		dir := t.TempDir()
		lp, _ := layout.Write(dir, empty.Index)
		idx := multiPlatformIndex(t, map[string]v1.Image{"linux/amd64": amd, "linux/arm64": arm})
		if err := lp.AppendIndex(idx); err != nil {
			t.Fatal(err)
		}
		got, err := FromLayout(dir, "linux/arm64")
		if err != nil {
			t.Fatal(err)
		}
		if digestOf(t, got) != digestOf(t, arm) {
			t.Error("got another image")
		}
	})

	t.Run("ambiguous", func(t *testing.T) {
		dir := t.TempDir()
		lp, _ := layout.Write(dir, empty.Index)
		lp.AppendImage(amd)
		lp.AppendImage(randomImage(t, "linux", "amd64"))
		_, err := FromLayout(dir, "linux/amd64")
		if err == nil {
			t.Fatal("ambiguous layout accepted")
		}
		t.Log(err)
	})

	t.Run("errors", func(t *testing.T) {
		if _, err := FromLayout(t.TempDir(), ""); err == nil {
			t.Error("empty dir accepted")
		}
		dir := t.TempDir()
		layout.Write(dir, empty.Index)
		if _, err := FromLayout(dir, ""); err == nil || !strings.Contains(err.Error(), "no image") {
			t.Errorf("empty layout: err = %v", err)
		}
	})
}

func TestFromDockerArchive(t *testing.T) {
	img := randomImage(t, "linux", "amd64")
	other := randomImage(t, "linux", "amd64")
	cfgName := func(img v1.Image) v1.Hash {
		h, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	single := filepath.Join(t.TempDir(), "single.tar")
	if err := tarball.WriteToFile(single, name.MustParseReference("example.com/app:v1"), img); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"", "example.com/app:v1"} {
		got, err := FromDockerArchive(single, tag)
		if err != nil {
			t.Fatalf("tag %q: %v", tag, err)
		}
		if cfgName(got) != cfgName(img) {
			t.Errorf("tag %q: got another image", tag)
		}
	}

	multi := filepath.Join(t.TempDir(), "multi.tar")
	err := tarball.MultiWriteToFile(multi, map[name.Tag]v1.Image{
		name.MustParseReference("example.com/app:v1").(name.Tag): img,
		name.MustParseReference("library/other:v2").(name.Tag):   other,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromDockerArchive(multi, "")
	if err == nil || !strings.Contains(err.Error(), "example.com/app:v1") {
		t.Errorf("multi-image archive without tag: err = %v, want the tags listed", err)
	}
	t.Log(err)
	got, err := FromDockerArchive(multi, "other:v2") // short form of index.docker.io/library/other:v2
	if err != nil {
		t.Fatal(err)
	}
	if cfgName(got) != cfgName(other) {
		t.Error("got another image")
	}
	if _, err := FromDockerArchive(multi, "example.com/app:v9"); err == nil || !strings.Contains(err.Error(), "no image tagged") {
		t.Errorf("unknown tag: err = %v", err)
	}
	if _, err := FromDockerArchive(filepath.Join(t.TempDir(), "nope.tar"), ""); err == nil {
		t.Error("missing file accepted")
	}
}

// tarDir packs the regular files and directories of dir into a tar file.
func tarDir(t testing.TB, dir, out string, extra ...ent) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tw.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range extra {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDetectAndOCIArchive(t *testing.T) {
	amd, arm := randomImage(t, "linux", "amd64"), randomImage(t, "linux", "arm64")
	base := t.TempDir()

	layoutDir := filepath.Join(base, "layout")
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	lp.AppendIndex(multiPlatformIndex(t, map[string]v1.Image{"linux/amd64": amd, "linux/arm64": arm}))

	dockerTar := filepath.Join(base, "docker.tar")
	if err := tarball.WriteToFile(dockerTar, name.MustParseReference("app:v1"), amd); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(base, "oci.tar")
	tarDir(t, layoutDir, ociTar)
	// A Docker 25+ "docker save" carries both manifest.json and an OCI layout.
	bothTar := filepath.Join(base, "both.tar")
	tarDir(t, layoutDir, bothTar, ent{name: "manifest.json", typ: tar.TypeReg, body: "[]"})
	notTar := filepath.Join(base, "not.tar")
	os.WriteFile(notTar, []byte(strings.Repeat("definitely not a tar archive\n", 40)), 0o644)
	otherTar := filepath.Join(base, "other.tar")
	tarDir(t, t.TempDir(), otherTar, ent{name: "hello.txt", typ: tar.TypeReg, body: "hi"})

	for p, want := range map[string]string{
		layoutDir: KindOCILayout, dockerTar: KindDockerArchive, ociTar: KindOCIArchive, bothTar: KindDockerArchive,
	} {
		got, err := Detect(p)
		if err != nil || got != want {
			t.Errorf("Detect(%s) = %q, %v; want %q", filepath.Base(p), got, err, want)
		}
	}
	for _, p := range []string{notTar, otherTar, t.TempDir(), filepath.Join(base, "missing")} {
		if kind, err := Detect(p); err == nil {
			t.Errorf("Detect(%s) = %q, want an error", p, kind)
		} else {
			t.Log(err)
		}
	}

	img, cleanup, err := FromOCIArchive(ociTar, "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, img) != digestOf(t, arm) {
		t.Error("oci archive: got another image")
	}
	layers, _ := img.Layers()
	if _, err := layers[0].Compressed(); err != nil {
		t.Errorf("read layer from unpacked archive: %v", err)
	}
	cleanup()

	// Open dispatches on Detect.
	for p, want := range map[string]v1.Image{layoutDir: arm, ociTar: arm, dockerTar: amd} {
		img, cleanup, err := Open(p, "linux/arm64", "")
		if err != nil {
			t.Fatalf("Open(%s): %v", filepath.Base(p), err)
		}
		gotCfg, _ := img.ConfigName()
		wantCfg, _ := want.ConfigName()
		if gotCfg != wantCfg {
			t.Errorf("Open(%s): got another image", filepath.Base(p))
		}
		cleanup()
	}
	tmpLeft, _ := filepath.Glob(filepath.Join(os.TempDir(), "warden-oci-archive-*"))
	if len(tmpLeft) > 0 {
		t.Logf("note: temp dirs present (maybe from concurrent runs): %v", tmpLeft)
	}
}

func TestFromOCIArchiveUntrusted(t *testing.T) {
	img := randomImage(t, "linux", "amd64")
	base := t.TempDir()
	layoutDir := filepath.Join(base, "layout")
	lp, _ := layout.Write(layoutDir, empty.Index)
	lp.AppendImage(img)
	canary := filepath.Join(base, "canary")
	os.Mkdir(canary, 0o755)

	// Links are ignored: the layout still opens, and nothing is written
	// through them.
	withLinks := filepath.Join(base, "links.tar")
	tarDir(t, layoutDir, withLinks,
		ent{name: "blobs/evil", typ: tar.TypeSymlink, link: canary},
		ent{name: "blobs/evil/x", typ: tar.TypeReg, body: "x"},
		ent{name: "blobs/hard", typ: tar.TypeLink, link: "/etc/passwd"},
	)
	got, cleanup, err := FromOCIArchive(withLinks, "")
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, got) != digestOf(t, img) {
		t.Error("got another image")
	}
	cleanup()

	escape := filepath.Join(base, "escape.tar")
	tarDir(t, layoutDir, escape, ent{name: "blobs/../../canary/evil", typ: tar.TypeReg, body: "x"})
	if _, _, err := FromOCIArchive(escape, ""); !errors.Is(err, ErrUnsafeEntry) {
		t.Errorf("escaping entry: err = %v", err)
	}
	if got := entries(t, canary); len(got) != 0 {
		t.Errorf("canary got %v", got)
	}
}
