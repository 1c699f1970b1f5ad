package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// zeroReader is an endless stream of zero bytes.
type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// bombTar is a tar holding one file of size zero bytes, gzip-compressed.
func bombTar(t testing.TB, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // about 820:1 on zeros
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: testTime}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
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

// imageOf makes a linux image of compressed (gzip) layer blobs.
func imageOf(t testing.TB, blobs ...[]byte) v1.Image {
	t.Helper()
	var layers []v1.Layer
	for _, b := range blobs {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return withPlatform(t, img, "linux", "amd64", "")
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func limitPolicy(t testing.TB, lim Limits) *Policy {
	t.Helper()
	p, err := NewPolicy(nil, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantLimit(t testing.TB, err error, limit string) {
	t.Helper()
	var le *LimitError
	if !errors.Is(err, ErrLimit) || !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("err = %v, want the %s limit", err, limit)
	}
	if !strings.Contains(err.Error(), limit) {
		t.Errorf("error %q does not name the limit %s", err, limit)
	}
}

func TestExpandLimiter(t *testing.T) {
	lim := Limits{MaxBytes: 1000, MaxRatio: 10, RatioMinBytes: 100}.withDefaults()
	read := func(base, compressed, n int64) error {
		e := &expandLimiter{r: io.LimitReader(zeroReader{}, n), lim: lim, base: base, compressed: func() int64 { return compressed }}
		_, err := io.Copy(io.Discard, e)
		return err
	}
	for _, c := range []struct {
		base, compressed, n int64
		want                string
	}{
		{0, 1, 100, ""},          // ratio 100 but not past ratio_min_bytes
		{0, 20, 200, ""},         // ratio 10: at the limit
		{0, 19, 200, LimitRatio}, // just past it
		{0, 0, 101, LimitRatio},  // nothing read yet counts as one byte
		{0, 1000, 1000, ""},      // the whole image budget
		{0, 1000, 1001, LimitBytes},
		{900, 1000, 101, LimitBytes}, // earlier layers count
		{900, 1000, 100, ""},
	} {
		err := read(c.base, c.compressed, c.n)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.want != "":
			wantLimit(t, err, c.want)
		}
	}
}

func TestProgressReaderDownloadLimit(t *testing.T) {
	pr := &progressReader{ctx: context.Background(), r: io.LimitReader(zeroReader{}, 5000), report: func(string, int64) {}, base: 1000, max: 5000}
	n, err := io.Copy(io.Discard, pr)
	wantLimit(t, err, LimitDownload)
	if n > 4000+32<<10 {
		t.Errorf("read %d bytes past the limit", n)
	}
	pr = &progressReader{ctx: context.Background(), r: io.LimitReader(zeroReader{}, 4000), report: func(string, int64) {}, base: 1000, max: 5000}
	if _, err := io.Copy(io.Discard, pr); err != nil {
		t.Fatal(err)
	}
}

// countingLayer counts how often its blob is opened and how much of it is read.
type countingLayer struct {
	v1.Layer
	opened int
	read   int64
}

func (l *countingLayer) Compressed() (io.ReadCloser, error) {
	l.opened++
	rc, err := l.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{readFunc(func(b []byte) (int, error) { n, err := rc.Read(b); l.read += int64(n); return n, err }), rc}, nil
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

// countingImage hands out countingLayers.
type countingImage struct {
	v1.Image
	layers []*countingLayer
}

func (i *countingImage) Layers() ([]v1.Layer, error) {
	ls, err := i.Image.Layers()
	if err != nil {
		return nil, err
	}
	if i.layers == nil {
		for _, l := range ls {
			i.layers = append(i.layers, &countingLayer{Layer: l})
		}
	}
	out := make([]v1.Layer, len(i.layers))
	for k, l := range i.layers {
		out[k] = l
	}
	return out, nil
}

func TestImportLimits(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	small := gzipBytes(t, tarBytes(t, dirE("d/", 0o755), fileE("d/f", "hello")))

	t.Run("gzip bomb ratio", func(t *testing.T) {
		bomb := bombTar(t, 512<<20) // 512 MiB of zeros in about 640 KiB
		img := &countingImage{Image: imageOf(t, small, bomb)}
		store := newDirStore(t)
		_, err := limitPolicy(t, Limits{RatioMinBytes: 1 << 20, MaxRatio: 100}).Import(ctx, img, store, nil)
		wantLimit(t, err, LimitRatio)
		// Stopped early: the blob was not read to its end.
		if l := img.layers[1]; l.read >= int64(len(bomb)) {
			t.Errorf("read %d of the bomb's %d bytes: not stopped early", l.read, len(bomb))
		}
		// Nothing of the bomb layer is left: only the good layer.
		if got := storeDirs(t, store); len(got) != 1 || strings.HasPrefix(got[0], ".tmp") {
			t.Errorf("store holds %v, want only the first layer", got)
		}
	})
	t.Run("gzip bomb bytes", func(t *testing.T) {
		bomb := bombTar(t, 16<<20)
		store := newDirStore(t)
		// The ratio would pass (min bytes above the layer), the image
		// size not.
		_, err := limitPolicy(t, Limits{MaxBytes: 8 << 20, RatioMinBytes: 1 << 30}).Import(ctx, imageOf(t, bomb), store, nil)
		wantLimit(t, err, LimitBytes)
		if got := storeDirs(t, store); len(got) != 0 {
			t.Errorf("store holds %v after a refused import", got)
		}
	})
	t.Run("bytes summed over layers", func(t *testing.T) {
		a, b := bombTar(t, 3<<20), bombTar(t, 3<<20+512)
		lim := Limits{MaxBytes: 5 << 20, RatioMinBytes: 1 << 30}
		if _, err := limitPolicy(t, lim).Import(ctx, imageOf(t, a), newDirStore(t), nil); err != nil {
			t.Fatalf("one layer under the limit: %v", err)
		}
		_, err := limitPolicy(t, lim).Import(ctx, imageOf(t, a, b), newDirStore(t), nil)
		wantLimit(t, err, LimitBytes)
	})
	t.Run("small compressible layer passes", func(t *testing.T) {
		// 8 MiB of zeros is 1000:1, under ratio_min_bytes.
		if _, err := limitPolicy(t, Limits{RatioMinBytes: 16 << 20, MaxRatio: 2}).Import(ctx, imageOf(t, bombTar(t, 8<<20)), newDirStore(t), nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("entries", func(t *testing.T) {
		var ents []ent
		for i := range 300 {
			ents = append(ents, fileE(fmt.Sprintf("f%03d", i), ""))
		}
		many := gzipBytes(t, tarBytes(t, ents...))
		store := newDirStore(t)
		_, err := limitPolicy(t, Limits{MaxEntries: 250}).Import(ctx, imageOf(t, many), store, nil)
		wantLimit(t, err, LimitEntries)
		if got := storeDirs(t, store); len(got) != 0 {
			t.Errorf("store holds %v after a refused import", got)
		}
		// Summed over the layers of the image.
		_, err = limitPolicy(t, Limits{MaxEntries: 301}).Import(ctx, imageOf(t, small, many), newDirStore(t), nil)
		wantLimit(t, err, LimitEntries)
		if _, err := limitPolicy(t, Limits{MaxEntries: 302}).Import(ctx, imageOf(t, small, many), newDirStore(t), nil); err != nil {
			t.Fatalf("at the limit: %v", err)
		}
	})
	t.Run("implicit parents count", func(t *testing.T) {
		// One entry whose parents make 200 directories.
		deep := strings.Repeat("d/", 200) + "f"
		layer := gzipBytes(t, tarBytes(t, fileE(deep, "x")))
		_, err := limitPolicy(t, Limits{MaxEntries: 100}).Import(ctx, imageOf(t, layer), newDirStore(t), nil)
		wantLimit(t, err, LimitEntries)
	})
	t.Run("declared download size", func(t *testing.T) {
		img := &countingImage{Image: imageOf(t, small, bombTar(t, 1<<20))}
		_, err := limitPolicy(t, Limits{MaxDownloadBytes: int64(len(small)) + 10}).Import(ctx, img, newDirStore(t), nil)
		wantLimit(t, err, LimitDownload)
		for i, l := range img.layers {
			if l.opened != 0 {
				t.Errorf("layer %d was opened %d times before the declared sizes were checked", i, l.opened)
			}
		}
	})
	t.Run("cached layers do not count", func(t *testing.T) {
		store := newDirStore(t)
		bomb := bombTar(t, 3<<20)
		if _, err := limitPolicy(t, Limits{RatioMinBytes: 1 << 30}).Import(ctx, imageOf(t, bomb), store, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := limitPolicy(t, Limits{MaxBytes: 1 << 20, MaxDownloadBytes: 1}).Import(ctx, imageOf(t, bomb), store, nil); err != nil {
			t.Fatalf("import of stored layers: %v", err)
		}
	})
}

func TestApplyLayerEntryLimit(t *testing.T) {
	requireRoot(t)
	data := tarBytes(t, fileE("a", ""), fileE("b", ""), fileE("c/d", ""))
	if st, err := applyLayer(t.TempDir(), bytes.NewReader(data), 4); err != nil || st.Entries != 4 {
		t.Fatalf("4 entries (c made implicitly) under a limit of 4: %+v, %v", st, err)
	}
	_, err := applyLayer(t.TempDir(), bytes.NewReader(data), 3)
	wantLimit(t, err, LimitEntries)
	if _, err := ApplyLayer(t.TempDir(), bytes.NewReader(data)); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != DefaultLimits() {
		t.Errorf("zero limits take %+v, want the defaults %+v", got, DefaultLimits())
	}
	if got := (*Policy)(nil).Limits(); got != DefaultLimits() {
		t.Errorf("nil policy limits %+v", got)
	}
	if _, err := NewPolicy(nil, nil, Limits{MaxBytes: -1}); err == nil {
		t.Error("negative limit accepted")
	}
}
