package files

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// ServeTar serves /tar: GET (and HEAD) packs a directory or file as a tar
// stream, POST (and PUT) extracts one under the path.
func (s *Service) ServeTar(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.packTar(w, r)
	case http.MethodPost, http.MethodPut:
		s.extractTar(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT")
		jsonError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// packTar streams path as a tar: for a directory, everything below it with
// names relative to it ("a.txt", "sub/", "sub/b.txt"); for a file, one entry
// named after it. Symlinks are stored as symlinks, never followed (a symlink
// given as path itself is followed). Regular files, directories and symlinks
// are stored; FIFOs, sockets and devices are skipped. Anything that cannot be
// read once the response has started aborts the stream, so a tar that
// arrives whole is complete.
func (s *Service) packTar(w http.ResponseWriter, r *http.Request) {
	u, err := s.httpUser(r)
	if err != nil {
		httpError(w, err)
		return
	}
	p := s.resolve(u, r.URL.Query().Get("path"))
	enc := negotiate(r.Header.Get("Accept-Encoding"), false)
	if enc == "" {
		jsonError(w, http.StatusNotAcceptable, noEncoding)
		return
	}
	started := false
	err = u.AsFS(func() error {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return pathErr("stat", p, err)
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if !isDir && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return invalidf("tar %s: not a directory or regular file", p)
		}
		// Open the top before the headers, so that failing to is a status.
		var top *os.File
		if isDir {
			d, err := os.Open(p)
			if err != nil {
				return pathErr("open", p, err)
			}
			top = d
		} else {
			f, err := openRegular(p, false)
			if err != nil {
				return err
			}
			top = f
		}
		defer top.Close()
		h := w.Header()
		h.Set("Content-Type", "application/x-tar")
		h.Add("Vary", "Accept-Encoding")
		if enc == "gzip" {
			h.Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(http.StatusOK)
		started = true
		if r.Method == http.MethodHead {
			return nil
		}
		var out io.Writer = w
		var gz *gzip.Writer
		if enc == "gzip" {
			gz = gzip.NewWriter(w)
			out = gz
		}
		pk := &packer{ctx: r.Context(), tw: tar.NewWriter(out)}
		var err error
		if isDir {
			err = pk.dirContents(top, p, "")
		} else {
			err = pk.fileFrom(top, p, path.Base(p))
		}
		if err != nil {
			return err
		}
		if err := pk.tw.Close(); err != nil {
			return err
		}
		if gz != nil {
			return gz.Close()
		}
		return nil
	})
	if err != nil {
		if started {
			panic(http.ErrAbortHandler) // reset the stream: the tar is incomplete
		}
		httpError(w, err)
	}
}

type packer struct {
	ctx context.Context
	tw  *tar.Writer
}

func (pk *packer) header(name string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		Uname:   sysuser.UserName(st.Uid),
		Gname:   sysuser.GroupName(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
}

// dirContents stores the entries of the open directory d (at abs, named rel
// in the archive, "" for the top).
func (pk *packer) dirContents(d *os.File, abs, rel string) error {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return pathErr("read", abs, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := pk.ctx.Err(); err != nil {
			return err
		}
		cabs, crel := path.Join(abs, n), path.Join(rel, n)
		var st unix.Stat_t
		if err := unix.Lstat(cabs, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return pathErr("stat", cabs, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr := pk.header(crel+"/", &st)
			hdr.Typeflag = tar.TypeDir
			if err := pk.tw.WriteHeader(hdr); err != nil {
				return err
			}
			fd, err := unix.Open(cabs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return pathErr("open", cabs, err)
			}
			sub := os.NewFile(uintptr(fd), cabs)
			err = pk.dirContents(sub, cabs, crel)
			sub.Close()
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := pk.file(cabs, crel); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(cabs)
			if err != nil {
				return pathErr("readlink", cabs, err)
			}
			hdr := pk.header(crel, &st)
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = target
			if err := pk.tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
	}
	return nil
}

// file stores the regular file at abs (not following a symlink).
func (pk *packer) file(abs, name string) error {
	f, err := openRegular(abs, true)
	if err != nil {
		return err
	}
	defer f.Close()
	return pk.fileFrom(f, abs, name)
}

func (pk *packer) fileFrom(f *os.File, abs, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return pathErr("stat", abs, err)
	}
	hdr := pk.header(name, &st)
	hdr.Typeflag = tar.TypeReg
	hdr.Size = st.Size
	if err := pk.tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that shrinks meanwhile fails here; one that grows is cut at
	// the size in its header.
	if _, err := io.CopyN(pk.tw, f, st.Size); err != nil {
		return pathErr("read", abs, err)
	}
	return nil
}

// extractTar extracts the request body (a tar, gzip-compressed or not) under
// path, creating path if missing.
func (s *Service) extractTar(w http.ResponseWriter, r *http.Request) {
	u, err := s.httpUser(r)
	if err != nil {
		httpError(w, err)
		return
	}
	dst := s.resolve(u, r.URL.Query().Get("path"))
	body, err := requestBody(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	br := bufio.NewReaderSize(body, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			httpError(w, invalidf("bad gzip body: %w", err))
			return
		}
		in = gz
	}
	var res ExtractResult
	err = u.AsFS(func() error {
		var st unix.Stat_t
		switch err := unix.Stat(dst, &st); {
		case errors.Is(err, unix.ENOENT):
			if _, err := mkdirAll(dst, 0o755); err != nil {
				return err
			}
		case err != nil:
			return pathErr("extract to", dst, err)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return invalidf("extract to %s: not a directory", dst)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			return pathErr("open", dst, err)
		}
		defer root.Close()
		res, err = Extract(r.Context(), root, in, Limits{MaxEntries: s.cfg.MaxTarEntries, MaxBytes: s.cfg.MaxTarBytes})
		return err
	})
	if err != nil {
		httpError(w, err)
		return
	}
	res.Path = dst
	writeJSON(w, res)
}

// ExtractResult is what Extract did; with Path set, the POST /tar response.
type ExtractResult struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// Limits bound one extraction.
type Limits struct {
	MaxEntries int   // headers of any kind; <= 0 means DefaultMaxTarEntries
	MaxBytes   int64 // file content; 0 means DefaultMaxTarBytes, < 0 no cap
}

// EntryError is the error of the first bad or failed tar entry.
type EntryError struct {
	Name string // the entry's name as stored in the archive
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("tar entry %q: %v", e.Name, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// entryErr wraps err for the entry name. Failures the filesystem reports as
// lack of space, permission or I/O keep their errno; everything else (an
// entry escaping the root, a missing hardlink target, a name too long, a
// file where a directory is needed) is the archive's fault: invalid.
func entryErr(name string, err error) error {
	err = rootCause(err)
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOSPC, unix.EDQUOT, unix.EACCES, unix.EPERM, unix.EROFS,
			unix.EIO, unix.ENOMEM, unix.EMFILE, unix.ENFILE:
			return &EntryError{Name: name, Err: err}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &EntryError{Name: name, Err: err}
	}
	return &EntryError{Name: name, Err: invalidf("%w", err)}
}

func badEntry(name, format string, args ...any) error {
	return &EntryError{Name: name, Err: invalidf(format, args...)}
}

// cleanEntryName validates a tar entry name (or hardlink target) and returns
// it cleaned and relative; "." is the root itself. Absolute names and names
// with a ".." component are refused outright, even when they would clean to
// something inside.
func cleanEntryName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("name contains a nul byte")
	case strings.HasPrefix(name, "/"):
		return "", errors.New("absolute path")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New(`path contains ".."`)
		}
	}
	return path.Clean(name), nil
}

type dirFix struct {
	name  string
	mode  os.FileMode
	mtime time.Time
}

// Extract extracts the tar stream r into root. Everything happens through
// root (os.Root), so no entry, whatever symlinks earlier entries made, can
// create, write or link anything outside it. Refused with an *EntryError
// naming the entry: absolute names, ".." components, hardlinks to targets
// outside the root or missing, character and block devices, FIFOs, other
// special types, and more entries or bytes than lim allows. Set-user-ID,
// set-group-ID and sticky bits are dropped. Ownership is not restored: what
// is created belongs to the calling thread's filesystem identity. Extraction
// stops at the first error; entries before it stay.
func Extract(ctx context.Context, root *os.Root, r io.Reader, lim Limits) (res ExtractResult, err error) {
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultMaxTarEntries
	}
	if lim.MaxBytes == 0 {
		lim.MaxBytes = DefaultMaxTarBytes
	}
	var fixes []dirFix
	defer func() {
		// Directory modes last (deepest first), so a read-only directory
		// does not block its own entries.
		for i := len(fixes) - 1; i >= 0; i-- {
			f := fixes[i]
			root.Chmod(f.name, f.mode)
			if !f.mtime.IsZero() {
				root.Chtimes(f.name, f.mtime, f.mtime)
			}
		}
	}()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, invalidf("read tar stream after %d entries: %w", res.Entries, err)
		}
		res.Entries++
		if res.Entries > lim.MaxEntries {
			return res, badEntry(hdr.Name, "archive has more than %d entries", lim.MaxEntries)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := cleanEntryName(hdr.Name)
		if err != nil {
			return res, badEntry(hdr.Name, "%w", err)
		}
		mode := os.FileMode(hdr.Mode) & os.ModePerm // no setuid, setgid, sticky
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
			if name == "." {
				return res, badEntry(hdr.Name, "a file cannot replace the target directory")
			}
			if hdr.Size < 0 {
				return res, badEntry(hdr.Name, "negative size")
			}
			if lim.MaxBytes >= 0 && hdr.Size > lim.MaxBytes-res.Bytes {
				return res, badEntry(hdr.Name, "archive holds more than %d bytes", lim.MaxBytes)
			}
			n, err := extractFile(root, name, tr, mode, hdr.ModTime)
			res.Bytes += n
			if err != nil {
				return res, entryErr(hdr.Name, err)
			}
		case tar.TypeDir:
			if name == "." {
				continue // the target itself: its mode is left alone
			}
			fix, err := extractDir(root, name, mode, hdr.ModTime)
			if err != nil {
				return res, entryErr(hdr.Name, err)
			}
			if fix != nil {
				fixes = append(fixes, *fix)
			}
		case tar.TypeSymlink:
			if name == "." {
				return res, badEntry(hdr.Name, "a symlink cannot replace the target directory")
			}
			if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return res, badEntry(hdr.Name, "bad symlink target")
			}
			// The target is stored as is: a symlink may point anywhere, but
			// root refuses to follow one out of the tree for later entries.
			if err := makeRoom(root, name); err != nil {
				return res, entryErr(hdr.Name, err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return res, entryErr(hdr.Name, err)
			}
		case tar.TypeLink:
			target, err := cleanEntryName(hdr.Linkname)
			if err != nil {
				return res, badEntry(hdr.Name, "hardlink target %q: %w", hdr.Linkname, err)
			}
			if target == name {
				continue
			}
			fi, err := root.Lstat(target)
			if err != nil {
				return res, entryErr(hdr.Name, fmt.Errorf("hardlink target %q: %w", hdr.Linkname, rootCause(err)))
			}
			if fi.IsDir() {
				return res, badEntry(hdr.Name, "hardlink target %q is a directory", hdr.Linkname)
			}
			if err := makeRoom(root, name); err != nil {
				return res, entryErr(hdr.Name, err)
			}
			if err := root.Link(target, name); err != nil {
				return res, entryErr(hdr.Name, err)
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return res, badEntry(hdr.Name, "device and fifo entries are not allowed")
		default:
			return res, badEntry(hdr.Name, "unsupported entry type %q", string(hdr.Typeflag))
		}
	}
}

// makeRoom creates the parents of name and removes a non-directory already
// at name (not following it). A directory in the way is an error.
func makeRoom(root *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return invalidf("a directory is in the way")
	}
	return root.Remove(name)
}

func extractFile(root *os.Root, name string, r io.Reader, mode os.FileMode, mtime time.Time) (int64, error) {
	if err := makeRoom(root, name); err != nil {
		return 0, err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, r)
	if err != nil {
		return n, err
	}
	if err := f.Chmod(mode); err != nil {
		return n, err
	}
	if !mtime.IsZero() {
		tv := []unix.Timeval{unix.NsecToTimeval(mtime.UnixNano()), unix.NsecToTimeval(mtime.UnixNano())}
		unix.Futimes(int(f.Fd()), tv)
	}
	return n, f.Close()
}

// extractDir creates directory name (with its parents). A directory that
// already exists is left as it is; a non-directory in the way is replaced.
// For a new directory it returns the mode and time to set at the end.
func extractDir(root *os.Root, name string, mode os.FileMode, mtime time.Time) (*dirFix, error) {
	fi, err := root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		return nil, nil
	case err == nil:
		if err := root.Remove(name); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if err := root.Mkdir(name, 0o700); err != nil {
		return nil, err
	}
	return &dirFix{name: name, mode: mode, mtime: mtime}, nil
}
