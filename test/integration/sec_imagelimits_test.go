package integration

// Issue 15, item 3: image layers are extracted under limits (uncompressed
// bytes, entries, expansion ratio, compressed download), counted as they
// stream, and a refused import leaves nothing in the state directory.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// gzipLayer gzips the tar the entries callback writes, at BestSpeed (about
// 820:1 on zeros).
func gzipLayer(t *testing.T, write func(tw *tar.Writer) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	if err := write(tw); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// bombLayer is one file of size zero bytes.
func bombLayer(t *testing.T, size int64) []byte {
	return gzipLayer(t, func(tw *tar.Writer) error {
		if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, zeros{}, size)
		return err
	})
}

// manyLayer holds n empty files.
func manyLayer(t *testing.T, n int) []byte {
	return gzipLayer(t, func(tw *tar.Writer) error {
		for i := range n {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%06d", i), Mode: 0o644, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// dockerArchive writes a "docker save" archive of an image of the given
// compressed layers and returns its bytes.
func dockerArchive(t *testing.T, layers ...[]byte) []byte {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.com/limits:1")
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// treeUsage counts the entries under dir and their apparent sizes.
func treeUsage(t *testing.T, dir string) (entries int, bytes int64, names []string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		entries++
		if fi, err := de.Info(); err == nil {
			bytes += fi.Size()
		}
		if len(names) < 20 {
			names = append(names, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return entries, bytes, names
}

func TestSecImageLimits(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run, daemonConfig(t, `images:
  max_uncompressed_bytes: 4194304
  max_entries: 1000
  max_ratio: 100
  ratio_min_bytes: 1048576
`)...)
	c := d.client(t, d.adminKey)
	templates := filepath.Join(state, "templates")
	entries0, bytes0, _ := treeUsage(t, templates)

	for _, tc := range []struct {
		name   string
		layers [][]byte
		limit  string
	}{
		// 16 MiB of zeros in about 20 KiB: the expansion ratio stops it
		// (at about 2 MiB).
		{"gzip bomb", [][]byte{bombLayer(t, 16<<20)}, "images.max_ratio"},
		// 1 GiB of zeros in about 1.3 MiB: the image's uncompressed size
		// stops it at 4 MiB, before the ratio (counted against the
		// compressed bytes read ahead) would.
		{"huge gzip bomb", [][]byte{bombLayer(t, 1<<30)}, "images.max_uncompressed_bytes"},
		// 2000 files in about 20 KiB.
		{"many entries", [][]byte{manyLayer(t, 2000)}, "images.max_entries"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			archive := dockerArchive(t, tc.layers...)
			t.Logf("archive: %d bytes", len(archive))
			_, err := c.ImportArchive(ctxT(t), warden.ArchiveImport{Name: "limits:" + strings.ReplaceAll(tc.name, " ", "-"), Format: "docker-archive"},
				bytes.NewReader(archive), nil)
			var we *warden.Error
			if !errors.As(err, &we) || we.Code != "payload_too_large" || !strings.Contains(we.Message, tc.limit) {
				t.Fatalf("import: %v; want payload_too_large naming %s", err, tc.limit)
			}
			t.Log(err)
		})
	}

	// Nothing is left behind: no partial layers, no temporary files (the
	// upload's spool file goes once the handler returns, so wait for it).
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, bytes, names := treeUsage(t, templates)
		if entries == entries0 && bytes == bytes0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("templates dir: %d entries, %d bytes after the refused imports; %d, %d before: %v", entries, bytes, entries0, bytes0, names)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The daemon keeps serving, and an image under the limits imports.
	resp, err := http.Get(d.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after the refused imports: %v", err)
	}
	resp.Body.Close()
	tm, err := c.ImportArchive(ctxT(t), warden.ArchiveImport{Name: "limits:ok", Format: "docker-archive"},
		bytes.NewReader(dockerArchive(t, manyLayer(t, 500), bombLayer(t, 512<<10))), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Layers != 2 {
		t.Errorf("imported %d layers, want 2", tm.Layers)
	}
}
