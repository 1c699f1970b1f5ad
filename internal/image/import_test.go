package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func diffIDs(t testing.TB, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range cf.RootFS.DiffIDs {
		ids = append(ids, h.String())
	}
	return ids
}

// storeDirs lists what a dirStore holds (published layers and leftovers).
func storeDirs(t testing.TB, s *dirStore) []string {
	return entries(t, s.base)
}

// TestImportFromRegistry is the end-to-end path: push the crafted image to
// an in-test registry, pull it, import it, check the layer directories, the
// result and the progress reports; a second import is fully cached.
func TestImportFromRegistry(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	host := newRegistry(t, nil)
	src := testImage(t)
	push(t, host+"/test/app:v1", src)
	img, err := local(t).FromRegistry(ctx, host+"/test/app:v1", RegistryOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}

	store := newDirStore(t)
	var events []Progress
	res, err := Import(ctx, img, store, func(p Progress) { events = append(events, p) })
	if err != nil {
		t.Fatal(err)
	}

	wantLayers := diffIDs(t, src)
	if !slices.Equal(res.Layers, wantLayers) {
		t.Errorf("layers = %v, want %v (bottom first)", res.Layers, wantLayers)
	}
	if res.Digest != digestOf(t, src).String() {
		t.Errorf("digest = %s, want %s", res.Digest, digestOf(t, src))
	}
	want := layer1Stats
	want.add(layer2Stats)
	if res.Stats != want {
		t.Errorf("stats = %+v\nwant    %+v", res.Stats, want)
	}
	c := res.Config
	if !slices.Equal(c.Env, testConfig.Env) || c.User != "1000:1000" || c.WorkingDir != "/home/alice" ||
		!slices.Equal(c.Entrypoint, testConfig.Entrypoint) || !slices.Equal(c.Cmd, testConfig.Cmd) ||
		!slices.Equal(c.ExposedPorts, []string{"53/udp", "8080/tcp"}) || c.Labels["org.example.role"] != "test" {
		t.Errorf("config = %+v", c)
	}
	checkLayer1(t, store.path(wantLayers[0]))
	checkLayer2(t, store.path(wantLayers[1]))

	// Progress: per layer a download from 0, an extract, a done with
	// Current == Total.
	layers, _ := src.Layers()
	for i, id := range wantLayers {
		size, _ := layers[i].Size()
		var phases []string
		var last int64 = -1
		for _, e := range events {
			if e.Layer != id {
				continue
			}
			if e.Index != i || e.Count != 2 || e.Total != size || e.Cached {
				t.Errorf("layer %d: bad event %+v (size %d)", i, e, size)
			}
			if e.Current < last {
				t.Errorf("layer %d: progress went backwards: %+v", i, e)
			}
			last = e.Current
			if len(phases) == 0 || phases[len(phases)-1] != e.Phase {
				phases = append(phases, e.Phase)
			}
		}
		if !slices.Equal(phases, []string{PhaseDownload, PhaseExtract, PhaseDone}) || last != size {
			t.Errorf("layer %d: phases %v, last current %d (size %d)", i, phases, last, size)
		}
	}
	if e := events[len(events)-1]; e.Phase != PhaseDone || e.Layer != wantLayers[1] {
		t.Errorf("last event %+v, want the top layer done", e)
	}

	// Again: everything cached, nothing stored.
	puts := store.puts
	events = nil
	res2, err := Import(ctx, img, store, func(p Progress) { events = append(events, p) })
	if err != nil {
		t.Fatal(err)
	}
	if store.puts != puts || !slices.Equal(res2.Layers, wantLayers) || res2.Stats != (Stats{}) {
		t.Errorf("second import: puts %d->%d, result %+v", puts, store.puts, res2)
	}
	if len(events) != 2 {
		t.Errorf("second import: %d events, want one per layer", len(events))
	}
	for i, e := range events {
		if !e.Cached || e.Phase != PhaseDone || e.Index != i || e.Layer != wantLayers[i] {
			t.Errorf("second import event %+v, want cached", e)
		}
	}
}

// TestImportCompressions imports layers stored gzip-compressed, zstd-
// compressed and uncompressed, both directly and through an OCI layout on
// disk and a docker archive.
func TestImportCompressions(t *testing.T) {
	requireRoot(t)
	data := func(name string) []byte {
		return tarBytes(t, dirE("d/", 0o755), fileE("d/"+name, "content of "+name))
	}
	gz := tarLayer(t, dirE("d/", 0o755), fileE("d/gzip", "content of gzip"))
	zb := data("zstd")
	zs, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(zb)), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	// Uncompressed, with trailing padding after the end-of-archive blocks
	// (the DiffID covers it).
	raw := append(data("plain"), make([]byte, 4096)...)
	plain := static.NewLayer(raw, types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(empty.Image, gz, zs, plain)
	if err != nil {
		t.Fatal(err)
	}
	img = withPlatform(t, img, "linux", "amd64", "")

	check := func(t *testing.T, img v1.Image) {
		t.Helper()
		layers, _ := img.Layers()
		for i, want := range []types.MediaType{types.DockerLayer, types.OCILayerZStd, types.OCIUncompressedLayer} {
			// The blobs really are gzip, zstd and plain tar...
			rc, err := layers[i].Compressed()
			if err != nil {
				t.Fatal(err)
			}
			magic := make([]byte, 4)
			io.ReadFull(rc, magic)
			rc.Close()
			if isGzip, isZstd := bytes.HasPrefix(magic, gzipMagic), bytes.Equal(magic, zstdMagic); isGzip != (i == 0) || isZstd != (i == 1) {
				t.Errorf("layer %d blob starts with %x", i, magic)
			}
			// ...even where the media type says otherwise (ggcr labels
			// every layer of a docker archive as gzip).
			if mt, _ := layers[i].MediaType(); mt != want {
				t.Logf("layer %d: media type %s for a %s blob", i, mt, want)
			}
		}
		store := newDirStore(t)
		res, err := Import(context.Background(), img, store, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"gzip", "zstd", "plain"} {
			got := readFile(t, filepath.Join(store.path(res.Layers[i]), "d", name))
			if got != "content of "+name {
				t.Errorf("layer %d: %q", i, got)
			}
		}
		if res.Stats.Files != 3 || res.Stats.Dirs != 3 {
			t.Errorf("stats %+v", res.Stats)
		}
	}
	t.Run("in memory", func(t *testing.T) { check(t, img) })
	t.Run("oci layout", func(t *testing.T) {
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		got, err := FromLayout(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		check(t, got)
	})
	t.Run("docker archive", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "img.tar")
		if err := tarball.WriteToFile(p, mustTag(t, "app:v1"), img); err != nil {
			t.Fatal(err)
		}
		got, err := FromDockerArchive(p, "")
		if err != nil {
			t.Fatal(err)
		}
		check(t, got)
	})
}

// TestImportDigestMismatch: a config whose DiffID does not match the layer
// content fails the import, and nothing is published.
func TestImportDigestMismatch(t *testing.T) {
	requireRoot(t)
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, fileE("a", "a")), tarLayer(t, fileE("b", "b")))
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	forged := cf.RootFS.DiffIDs[1]
	forged.Hex = strings.Repeat("ab", 32)
	cf.RootFS.DiffIDs[1] = forged
	bad, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	good := diffIDs(t, img)[0]
	check := func(t *testing.T, got v1.Image) {
		store := newDirStore(t)
		_, err = Import(context.Background(), got, store, nil)
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("err = %v, want a digest mismatch", err)
		}
		t.Log(err)
		if held := storeDirs(t, store); !slices.Equal(held, []string{strings.TrimPrefix(good, "sha256:")}) {
			t.Errorf("store holds %v, want only the good bottom layer", held)
		}
	}
	t.Run("in memory", func(t *testing.T) { check(t, bad) })
	t.Run("oci layout", func(t *testing.T) {
		dir := t.TempDir()
		lp, _ := layout.Write(dir, empty.Index)
		if err := lp.AppendImage(bad); err != nil {
			t.Fatal(err)
		}
		got, err := FromLayout(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		check(t, got)
	})
	t.Run("registry", func(t *testing.T) {
		host := newRegistry(t, nil)
		push(t, host+"/bad/app:v1", bad)
		got, err := local(t).FromRegistry(context.Background(), host+"/bad/app:v1", RegistryOptions{Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		check(t, got)
	})
}

func TestImportUnsafeLayer(t *testing.T) {
	requireRoot(t)
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, symE("x", "/etc"), fileE("x/warden-image-test-evil", "x")))
	if err != nil {
		t.Fatal(err)
	}
	store := newDirStore(t)
	_, err = Import(context.Background(), img, store, nil)
	if !errors.Is(err, ErrUnsafeEntry) {
		t.Fatalf("err = %v, want ErrUnsafeEntry", err)
	}
	if held := storeDirs(t, store); len(held) != 0 {
		t.Errorf("store holds %v", held)
	}
	if _, err := os.Lstat("/etc/warden-image-test-evil"); err == nil {
		t.Error("/etc/warden-image-test-evil created")
	}
}

func TestImportCancel(t *testing.T) {
	requireRoot(t)
	big := make([]byte, 3<<20) // incompressible: several progress steps
	rand.Read(big)
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, ent{name: "big", typ: tar.TypeReg, body: string(big), mode: 0o644}))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		store := newDirStore(t)
		if _, err := Import(ctx, img, store, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("during download", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		store := newDirStore(t)
		_, err := Import(ctx, img, store, func(p Progress) {
			if p.Phase == PhaseDownload && p.Current > 0 {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
		if held := storeDirs(t, store); len(held) != 0 {
			t.Errorf("store holds %v", held)
		}
	})
}

func TestImportRefusesNonLinux(t *testing.T) {
	img := withPlatform(t, randomImage(t, "linux", "amd64"), "windows", "amd64", "")
	if _, err := Import(context.Background(), img, newDirStore(t), nil); err == nil || !strings.Contains(err.Error(), "windows") {
		t.Fatalf("err = %v", err)
	}
}

func TestImageConfig(t *testing.T) {
	img, err := mutate.Config(empty.Image, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ImageConfig(img)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.ExposedPorts, []string{"53/udp", "8080/tcp"}) || c.User != testConfig.User || len(c.Labels) != 1 {
		t.Errorf("config %+v", c)
	}
	c.Labels["x"] = "y" // a copy: must not alias the image's map
	if _, ok := testConfig.Labels["x"]; ok {
		t.Error("labels map aliased")
	}
	c2, err := ImageConfig(empty.Image)
	if err != nil || c2.Labels != nil || c2.ExposedPorts != nil {
		t.Errorf("empty image config %+v, %v", c2, err)
	}
}

func mustTag(t testing.TB, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}
