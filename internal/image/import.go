package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
)

// LayerStore holds extracted layers, keyed by DiffID.
type LayerStore interface {
	// Has reports whether the layer id ("sha256:<hex>" DiffID) is stored.
	Has(id string) bool
	// Put makes a fresh empty directory, calls fill with it, and publishes
	// it atomically as layer id if fill succeeds (discarding it
	// otherwise). It must be safe for concurrent use.
	Put(id string, fill func(dir string) error) error
}

// Progress phases.
const (
	// PhaseDownload reports bytes of the (compressed) layer blob read so
	// far. Extraction is streamed, so files land on disk meanwhile.
	PhaseDownload = "download"
	// PhaseExtract reports that the blob has been read completely and the
	// layer is being finished: directory times, DiffID verification and
	// publication in the store.
	PhaseExtract = "extract"
	// PhaseDone reports a layer that is stored (Cached: it already was).
	// Every layer gets exactly one PhaseDone event.
	PhaseDone = "done"
)

// Progress is reported by [Import] as it goes.
type Progress struct {
	Phase   string // PhaseDownload, PhaseExtract or PhaseDone
	Layer   string // DiffID of the layer
	Index   int    // zero-based position of the layer, bottom first
	Count   int    // number of layers of the image
	Current int64  // compressed bytes read so far
	Total   int64  // compressed size of the layer
	Cached  bool   // the layer was already in the store and was skipped
}

// Result describes an imported image.
type Result struct {
	Layers []string // DiffIDs, bottom layer first (as in the image)
	Config Config   // runtime configuration
	Digest string   // manifest digest, "sha256:<hex>"
	Stats  Stats    // summed over the layers extracted by this import
}

// ErrDigestMismatch is wrapped by the error [Import] returns when a layer's
// uncompressed content does not hash to its DiffID.
var ErrDigestMismatch = errors.New("layer digest mismatch")

// Import extracts every layer of img that store does not have yet and
// returns the layer stack and configuration of img.
//
// Layers are processed bottom first. Each layer blob is read, decompressed
// (gzip, zstd or uncompressed, recognised by content), extracted with
// [ApplyLayer] into the directory store.Put provides, and its content is
// hashed: if the hash differs from the layer's DiffID in the image config the
// layer is not published and the error wraps [ErrDigestMismatch]. Only linux
// images are accepted. progress, if not nil, is called from the calling
// goroutine. Cancelling ctx aborts the import, including a download in
// progress. On error, layers imported before the failing one stay in store.
//
// Images from "docker save" archives with uncompressed layers are costly:
// ggcr gzips each layer to compute the manifest digest and layer sizes, and
// again to stream it.
func Import(ctx context.Context, img v1.Image, store LayerStore, progress func(Progress)) (Result, error) {
	return (*Policy)(nil).Import(ctx, img, store, progress)
}

// Import is [Import] under p's [Limits]: the import stops with an error
// wrapping [ErrLimit] (a [*LimitError] naming the limit) as soon as one is
// passed, and the layer being extracted is discarded. The sizes the image
// declares for the layers to extract are checked against MaxDownloadBytes
// before anything is downloaded.
func (p *Policy) Import(ctx context.Context, img v1.Image, store LayerStore, progress func(Progress)) (Result, error) {
	lim := p.Limits()
	if progress == nil {
		progress = func(Progress) {}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Result{}, fmt.Errorf("read image config: %w", err)
	}
	if cf != nil && cf.OS != "" && cf.OS != "linux" {
		return Result{}, fmt.Errorf("image is for os %q, only linux images can be imported", cf.OS)
	}
	cfg, err := ImageConfig(img)
	if err != nil {
		return Result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("image digest: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return Result{}, fmt.Errorf("image layers: %w", err)
	}
	// The DiffIDs come from the config (covered by the image digest), not
	// from v1.Layer.DiffID: for some sources (OCI layouts) ggcr computes
	// that by hashing the content, which costs a full extra read and
	// verifies nothing.
	if cf == nil || len(cf.RootFS.DiffIDs) != len(layers) {
		n := 0
		if cf != nil {
			n = len(cf.RootFS.DiffIDs)
		}
		return Result{}, fmt.Errorf("image config lists %d diffids for %d layers", n, len(layers))
	}
	// Refuse an image that declares more to download than allowed before
	// downloading any of it.
	var declared int64
	for i, l := range layers {
		if store.Has(cf.RootFS.DiffIDs[i].String()) {
			continue
		}
		size, err := l.Size()
		if err != nil {
			return Result{}, fmt.Errorf("layer %d: size: %w", i, err)
		}
		if size < 0 || size > lim.MaxDownloadBytes-declared {
			return Result{}, &LimitError{Limit: LimitDownload, Max: lim.MaxDownloadBytes}
		}
		declared += size
	}
	res := Result{Config: cfg, Digest: digest.String(), Layers: make([]string, 0, len(layers))}
	count := len(layers)
	var used usage
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("import canceled: %w", err)
		}
		diffID := cf.RootFS.DiffIDs[i]
		id := diffID.String()
		if diffID.Algorithm != "sha256" {
			return Result{}, fmt.Errorf("layer %d: unsupported diffid algorithm in %s", i, id)
		}
		res.Layers = append(res.Layers, id)
		if store.Has(id) {
			progress(Progress{Phase: PhaseDone, Layer: id, Index: i, Count: count, Cached: true})
			continue
		}
		if mt, err := l.MediaType(); err == nil && !mt.IsLayer() && !strings.Contains(string(mt), ".tar") {
			return Result{}, fmt.Errorf("layer %d (%s): unsupported media type %q", i, id, mt)
		}
		size, err := l.Size()
		if err != nil {
			return Result{}, fmt.Errorf("layer %d (%s): size: %w", i, id, err)
		}
		ev := Progress{Layer: id, Index: i, Count: count, Total: size}
		var st Stats
		err = store.Put(id, func(dir string) error {
			var err error
			st, err = extractLayer(ctx, l, dir, diffID, lim, &used, func(phase string, cur int64) {
				e := ev
				e.Phase, e.Current = phase, cur
				progress(e)
			})
			return err
		})
		if err != nil {
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				err = fmt.Errorf("%w (%w)", cerr, err)
			}
			return Result{}, fmt.Errorf("layer %d (%s): %w", i, id, err)
		}
		res.Stats.add(st)
		e := ev
		e.Phase, e.Current = PhaseDone, size
		progress(e)
	}
	return res, nil
}

// extractLayer streams layer l into dir and checks its DiffID, counting
// what it reads and extracts into used and stopping once lim is passed.
func extractLayer(ctx context.Context, l v1.Layer, dir string, diffID v1.Hash, lim Limits, used *usage, report func(phase string, cur int64)) (Stats, error) {
	rc, err := l.Compressed()
	if err != nil {
		return Stats{}, fmt.Errorf("open layer blob: %w", err)
	}
	closeBlob := sync.OnceValue(rc.Close)
	defer closeBlob()
	// Closing the blob unblocks a read stuck on the network.
	stop := context.AfterFunc(ctx, func() { closeBlob() })
	defer stop()

	pr := &progressReader{ctx: ctx, r: rc, report: report, base: used.download, max: lim.MaxDownloadBytes}
	el := &expandLimiter{lim: lim, base: used.bytes, compressed: func() int64 { return pr.n }}
	defer func() {
		used.download += pr.n
		used.bytes += el.n
	}()
	report(PhaseDownload, 0)
	dec, err := decompress(bufio.NewReaderSize(pr, 256<<10))
	if err != nil {
		return Stats{}, err
	}
	defer dec.Close()
	el.r = dec

	h := sha256.New()
	r := io.TeeReader(el, h)
	st, err := applyLayer(dir, r, lim.MaxEntries-used.entries)
	used.entries += int64(st.Entries)
	if err != nil {
		return st, err
	}
	// Hash whatever follows the end of the archive (padding) too: the
	// DiffID covers the whole uncompressed stream.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return st, fmt.Errorf("read layer: %w", err)
	}
	report(PhaseExtract, pr.n)
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID.String() {
		return st, fmt.Errorf("%w: content hashes to %s, expected %s", ErrDigestMismatch, got, diffID)
	}
	return st, nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress returns the uncompressed stream of a layer blob, recognising
// gzip and zstd by their magic numbers; anything else is taken as a plain
// tar.
func decompress(br *bufio.Reader) (io.ReadCloser, error) {
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip layer: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd layer: %w", err)
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

const progressStep = 1 << 20

// progressReader counts bytes, reports progress every progressStep bytes and
// at the end, and stops reading once ctx is done.
type progressReader struct {
	ctx    context.Context
	r      io.Reader
	n      int64
	last   int64 // last reported count
	next   int64 // report again at this count
	report func(phase string, cur int64)
	base   int64 // bytes read for earlier layers of the image
	max    int64 // images.max_download_bytes
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	if err != nil && p.ctx.Err() != nil {
		// The blob was closed because ctx ended.
		return n, p.ctx.Err()
	}
	if p.base+p.n > p.max {
		return 0, &LimitError{Limit: LimitDownload, Max: p.max}
	}
	if (n > 0 && p.n >= p.next) || (err == io.EOF && p.n != p.last) {
		p.last, p.next = p.n, p.n+progressStep
		p.report(PhaseDownload, p.n)
	}
	return n, err
}
