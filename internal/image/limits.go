package image

import (
	"errors"
	"fmt"
	"io"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Limits bound what one import may download and write. They are counted
// as the layers stream in, so an import stops as soon as one is passed;
// layers already in the store are not counted.
type Limits struct {
	// MaxBytes bounds the uncompressed layer streams of an image, summed
	// (images.max_uncompressed_bytes).
	MaxBytes int64
	// MaxEntries bounds the entries of an image, summed over its layers:
	// tar entries plus the parent directories they make (images.max_entries).
	MaxEntries int64
	// MaxRatio bounds how many times larger than its compressed blob a
	// layer's uncompressed stream may grow (images.max_ratio), checked
	// once the stream is past RatioMinBytes (images.ratio_min_bytes), so
	// small, highly compressible layers pass.
	MaxRatio      int64
	RatioMinBytes int64
	// MaxDownloadBytes bounds the compressed layer blobs of an image,
	// summed (images.max_download_bytes); the sizes the image declares are
	// checked before anything is downloaded, and the bytes read as they
	// come.
	MaxDownloadBytes int64
}

// Default limits. 8 GiB uncompressed and 1M entries hold large real images
// (full language toolchains are a few GiB and a few hundred thousand files)
// while keeping one import from filling the state disk or its inodes.
// Real layers compress 2 to 10 times; gzip reaches about 1000:1 only on
// repetitive data (the zeros of a bomb), so 100:1 past 64 MiB stops a bomb
// within its first GiB and leaves any layer under 64 MiB alone. Compressed
// downloads are capped at 4 GiB, as uploaded archives are.
const (
	DefaultMaxBytes         = 8 << 30
	DefaultMaxEntries       = 1_000_000
	DefaultMaxRatio         = 100
	DefaultRatioMinBytes    = 64 << 20
	DefaultMaxDownloadBytes = 4 << 30
)

// DefaultLimits returns the default import limits.
func DefaultLimits() Limits {
	return Limits{MaxBytes: DefaultMaxBytes, MaxEntries: DefaultMaxEntries, MaxRatio: DefaultMaxRatio,
		RatioMinBytes: DefaultRatioMinBytes, MaxDownloadBytes: DefaultMaxDownloadBytes}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBytes == 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxEntries == 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxRatio == 0 {
		l.MaxRatio = d.MaxRatio
	}
	if l.RatioMinBytes == 0 {
		l.RatioMinBytes = d.RatioMinBytes
	}
	if l.MaxDownloadBytes == 0 {
		l.MaxDownloadBytes = d.MaxDownloadBytes
	}
	return l
}

func (l Limits) validate() error {
	if l.MaxBytes < 0 || l.MaxEntries < 0 || l.MaxRatio < 0 || l.RatioMinBytes < 0 || l.MaxDownloadBytes < 0 {
		return errors.New("image limits must not be negative")
	}
	return nil
}

// ErrLimit is wrapped by the errors of imports that pass one of [Limits].
// It and LimitError are of kind TooLarge (internal/errkind).
var ErrLimit = errkind.Sentinel(errkind.TooLarge, "image import limit exceeded", errkind.WithDetail)

// Names of the limits in [LimitError] (their configuration keys).
const (
	LimitBytes    = "images.max_uncompressed_bytes"
	LimitEntries  = "images.max_entries"
	LimitRatio    = "images.max_ratio"
	LimitDownload = "images.max_download_bytes"
)

// LimitError is an import stopped by a limit. It wraps [ErrLimit].
type LimitError struct {
	Limit string // LimitBytes, LimitEntries, LimitRatio or LimitDownload
	Max   int64  // the limit's value
	// MinBytes is RatioMinBytes for LimitRatio.
	MinBytes int64
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case LimitBytes:
		return fmt.Sprintf("image is larger than %d bytes uncompressed (limit %s)", e.Max, e.Limit)
	case LimitEntries:
		return fmt.Sprintf("image has more than %d entries (limit %s)", e.Max, e.Limit)
	case LimitRatio:
		return fmt.Sprintf("layer expands to more than %d times its compressed size past %d bytes (limit %s)", e.Max, e.MinBytes, e.Limit)
	case LimitDownload:
		return fmt.Sprintf("image has more than %d bytes of compressed layers to download (limit %s)", e.Max, e.Limit)
	}
	return fmt.Sprintf("image exceeds limit %s (%d)", e.Limit, e.Max)
}

// Is makes a LimitError match [ErrLimit].
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Kind makes a LimitError too large (errkind.Kinded).
func (e *LimitError) Kind() errkind.Kind { return errkind.TooLarge }

// Public returns the message callers see: all of it.
func (e *LimitError) Public() string { return e.Error() }

// usage is what an import has used of its limits so far.
type usage struct {
	download int64 // compressed bytes read
	bytes    int64 // uncompressed bytes read
	entries  int64 // entries extracted
}

// expandLimiter reads the uncompressed stream of one layer, failing once
// the image's uncompressed total or the layer's expansion ratio passes its
// limit. compressed reports the compressed bytes read so far.
type expandLimiter struct {
	r          io.Reader
	lim        Limits
	base       int64 // uncompressed bytes of earlier layers
	n          int64 // uncompressed bytes of this layer
	compressed func() int64
}

func (e *expandLimiter) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	e.n += int64(n)
	if err := e.check(); err != nil {
		return 0, err
	}
	return n, err
}

func (e *expandLimiter) check() error {
	if e.base+e.n > e.lim.MaxBytes {
		return &LimitError{Limit: LimitBytes, Max: e.lim.MaxBytes}
	}
	if e.n > e.lim.RatioMinBytes {
		c := max(e.compressed(), 1)
		if e.n/c >= e.lim.MaxRatio && e.n > e.lim.MaxRatio*c {
			return &LimitError{Limit: LimitRatio, Max: e.lim.MaxRatio, MinBytes: e.lim.RatioMinBytes}
		}
	}
	return nil
}
