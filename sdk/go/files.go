package warden

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// ReadOptions tunes [Client.ReadFile].
type ReadOptions struct {
	// User whose permissions apply; empty for the sandbox's user.
	User string
	// Offset is the first byte to read.
	Offset int64
	// Length is how many bytes to read from Offset; 0 reads to the end.
	Length int64
}

// WriteOptions tunes [Client.WriteFile].
type WriteOptions struct {
	// Mode holds the permission bits; 0 means the daemon's default, 0644.
	Mode fs.FileMode
	// User whose permissions apply and who owns the file; empty for the sandbox's user.
	User string
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// ReadFile opens the file at path in the sandbox. The caller closes the reader.
func (c *Client) ReadFile(ctx context.Context, id, path string, opts ReadOptions) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	h := http.Header{}
	ranged := opts.Offset > 0 || opts.Length > 0
	if ranged {
		r := "bytes=" + strconv.FormatInt(opts.Offset, 10) + "-"
		if opts.Length > 0 {
			r += strconv.FormatInt(opts.Offset+opts.Length-1, 10)
		}
		h.Set("Range", r)
	}
	resp, err := c.send(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/files", id),
		query:      q,
		header:     h,
		accept:     "application/octet-stream",
		idempotent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("read %s in sandbox %s: %w", path, id, err)
	}
	if ranged && resp.StatusCode == http.StatusOK {
		// The whole file came back: cut the range out of it.
		if _, err := io.CopyN(io.Discard, resp.Body, opts.Offset); err != nil && err != io.EOF {
			resp.Body.Close()
			return nil, fmt.Errorf("read %s in sandbox %s: %w", path, id, err)
		}
		if opts.Length > 0 {
			return struct {
				io.Reader
				io.Closer
			}{io.LimitReader(resp.Body, opts.Length), resp.Body}, nil
		}
	}
	return resp.Body, nil
}

// WriteFile replaces the file at path with the content of r, atomically, creating missing
// parent directories. If the request must be retried, r is rewound when it is an
// io.Seeker; other readers are sent once.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, opts WriteOptions) (Entry, error) {
	q := url.Values{"path": {path}}
	if opts.Mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", octalMode(opts.Mode)))
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	var e Entry
	err := c.do(ctx, &request{
		method:      http.MethodPut,
		path:        pathf("/v1/sandboxes/%s/files", id),
		query:       q,
		body:        r,
		contentType: "application/octet-stream",
		idempotent:  true,
	}, &e)
	if err != nil {
		return Entry{}, fmt.Errorf("write %s in sandbox %s: %w", path, id, err)
	}
	return e, nil
}

// octalMode converts an fs.FileMode's permission and special bits to Unix octal.
func octalMode(m fs.FileMode) uint32 {
	o := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		o |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		o |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		o |= 0o1000
	}
	return o
}

// Remove deletes the path; a directory is removed with everything in it.
func (c *Client) Remove(ctx context.Context, id, path string) error {
	err := c.do(ctx, &request{
		method:     http.MethodDelete,
		path:       pathf("/v1/sandboxes/%s/files", id),
		query:      url.Values{"path": {path}},
		idempotent: true,
	}, nil)
	if err != nil {
		return fmt.Errorf("remove %s in sandbox %s: %w", path, id, err)
	}
	return nil
}

// Stat describes the path.
func (c *Client) Stat(ctx context.Context, id, path string) (Entry, error) {
	var e Entry
	err := c.do(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/fs/stat", id),
		query:      url.Values{"path": {path}},
		idempotent: true,
	}, &e)
	if err != nil {
		return Entry{}, fmt.Errorf("stat %s in sandbox %s: %w", path, id, err)
	}
	return e, nil
}

// List returns the entries of the directory at path, depth levels deep (0 or 1: only the
// directory's own entries).
func (c *Client) List(ctx context.Context, id, path string, depth int) ([]Entry, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out struct {
		Entries []Entry `json:"entries"`
	}
	err := c.do(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/fs/list", id),
		query:      q,
		idempotent: true,
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("list %s in sandbox %s: %w", path, id, err)
	}
	return out.Entries, nil
}

// Mkdir creates the directory and missing parents. It fails with a conflict error (see
// [IsConflict]) when the path exists.
func (c *Client) Mkdir(ctx context.Context, id, path string) (Entry, error) {
	var e Entry
	err := c.do(ctx, &request{
		method: http.MethodPost,
		path:   pathf("/v1/sandboxes/%s/fs/mkdir", id),
		json:   map[string]string{"path": path},
	}, &e)
	if err != nil {
		return Entry{}, fmt.Errorf("mkdir %s in sandbox %s: %w", path, id, err)
	}
	return e, nil
}

// Move renames source to destination and returns the entry at its new path.
func (c *Client) Move(ctx context.Context, id, source, destination string) (Entry, error) {
	var e Entry
	err := c.do(ctx, &request{
		method: http.MethodPost,
		path:   pathf("/v1/sandboxes/%s/fs/move", id),
		json:   map[string]string{"source": source, "destination": destination},
	}, &e)
	if err != nil {
		return Entry{}, fmt.Errorf("move %s to %s in sandbox %s: %w", source, destination, id, err)
	}
	return e, nil
}

// DownloadArchive returns a tar archive of the directory at path. The caller closes it.
func (c *Client) DownloadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/archive", id),
		query:      url.Values{"path": {path}},
		accept:     "application/x-tar",
		idempotent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("download archive of %s in sandbox %s: %w", path, id, err)
	}
	return resp.Body, nil
}

// UploadArchive extracts the tar archive read from r into the directory at path. Entries
// that would land outside path are refused with a bad_request error naming the entry.
func (c *Client) UploadArchive(ctx context.Context, id, path string, r io.Reader) error {
	err := c.do(ctx, &request{
		method:      http.MethodPut,
		path:        pathf("/v1/sandboxes/%s/archive", id),
		query:       url.Values{"path": {path}},
		body:        r,
		contentType: "application/x-tar",
		idempotent:  true,
	}, nil)
	if err != nil {
		return fmt.Errorf("upload archive to %s in sandbox %s: %w", path, id, err)
	}
	return nil
}

// Presign returns a URL that reads or writes one file without an API key until it expires.
func (c *Client) Presign(ctx context.Context, id string, req PresignRequest) (PresignedURL, error) {
	var p PresignedURL
	err := c.do(ctx, &request{
		method:     http.MethodPost,
		path:       pathf("/v1/sandboxes/%s/files/presign", id),
		json:       req,
		idempotent: true,
	}, &p)
	if err != nil {
		return PresignedURL{}, fmt.Errorf("presign %s %s in sandbox %s: %w", req.Op, req.Path, id, err)
	}
	return p, nil
}

// Watch watches the directory at path (and every directory below it when recursive) and
// returns once the watch is in place. Close the stream to stop watching.
func (c *Client) Watch(ctx context.Context, id, path string, recursive bool) (*WatchStream, error) {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.send(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/fs/watch", id),
		query:      q,
		accept:     "application/x-ndjson",
		idempotent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s in sandbox %s: %w", path, id, err)
	}
	w := &WatchStream{ctx: ctx, dec: newLineDecoder(resp.Body, c.maxEvent)}
	var first WatchEvent
	if err := w.read(&first); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch %s in sandbox %s: %w", path, id, err)
	}
	if first.Type != "start" {
		w.pending = &first
	}
	return w, nil
}

// WatchStream reads the changes seen by [Client.Watch]. Its methods must not be called
// concurrently, except Close.
type WatchStream struct {
	ctx       context.Context
	dec       *lineDecoder
	pending   *WatchEvent
	err       error
	closeOnce sync.Once
}

func (w *WatchStream) read(ev *WatchEvent) error {
	if w.err != nil {
		return w.err
	}
	err := w.dec.next(ev)
	switch {
	case err != nil && w.ctx.Err() != nil:
		err = w.ctx.Err()
	case err == nil && ev.Type == EventError:
		err = &Error{Code: ev.Code, Message: ev.Message}
	}
	if err != nil {
		w.err = err
	}
	return err
}

// Next returns the next change. It returns io.EOF when the daemon ended the stream, and an
// *Error when the watch failed.
func (w *WatchStream) Next() (WatchEvent, error) {
	if w.pending != nil {
		ev := *w.pending
		w.pending = nil
		return ev, nil
	}
	var ev WatchEvent
	if err := w.read(&ev); err != nil {
		return WatchEvent{}, err
	}
	return ev, nil
}

// Events iterates over changes until the stream ends or fails; a failure other than the
// end of the stream is yielded once, as the last element.
func (w *WatchStream) Events() iter.Seq2[WatchEvent, error] {
	return func(yield func(WatchEvent, error) bool) {
		for {
			ev, err := w.Next()
			if err == io.EOF {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Close stops watching.
func (w *WatchStream) Close() error {
	w.closeOnce.Do(func() { w.dec.close() })
	return nil
}
