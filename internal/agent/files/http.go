package files

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// Metadata limits of envd (§6.1): an xattr name is at most 255 bytes, of
// which "user.e2b." takes 9.
const (
	maxMetaKey   = 246
	maxMetaTotal = 4096
	// maxParts caps the file parts of one multipart upload (each holds a
	// temporary file until the last part is in).
	maxParts = 10_000
)

// ServeFiles serves /files: GET (and HEAD) reads a file, POST (and PUT)
// writes one or more.
func (s *Service) ServeFiles(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.readFile(w, r)
	case http.MethodPost, http.MethodPut:
		s.writeFiles(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT")
		jsonError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// negotiate picks the response encoding from Accept-Encoding: "gzip",
// "identity", or "" when neither is acceptable. Identity is acceptable when
// the header is absent or lists identity or "*" with q > 0; a client that
// lists only codings the agent lacks gets 406. With a Range request identity
// wins, so the range can be served.
func negotiate(accept string, preferIdentity bool) string {
	accept = strings.TrimSpace(accept)
	if accept == "" {
		return "identity"
	}
	q := map[string]float64{}
	for _, part := range strings.Split(accept, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding == "" {
			continue
		}
		v := 1.0
		for _, p := range strings.Split(params, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					v = f
				}
			}
		}
		if coding == "x-gzip" {
			coding = "gzip"
		}
		if _, dup := q[coding]; !dup {
			q[coding] = v
		}
	}
	qOf := func(c string) float64 {
		if v, ok := q[c]; ok {
			return v
		}
		if v, ok := q["*"]; ok {
			return v
		}
		return 0
	}
	gzipOK, identityOK := qOf("gzip") > 0, qOf("identity") > 0
	switch {
	case identityOK && preferIdentity:
		return "identity"
	case gzipOK:
		return "gzip"
	case identityOK:
		return "identity"
	}
	return ""
}

const noEncoding = "no acceptable encoding found, supported: [identity, gzip]"

// readFile streams a regular file. Range and conditional requests work for
// identity responses (http.ServeContent); gzip responses are whole.
func (s *Service) readFile(w http.ResponseWriter, r *http.Request) {
	u, err := s.httpUser(r)
	if err != nil {
		httpError(w, err)
		return
	}
	p := s.resolve(u, r.URL.Query().Get("path"))
	enc := negotiate(r.Header.Get("Accept-Encoding"), r.Header.Get("Range") != "")
	if enc == "" {
		jsonError(w, http.StatusNotAcceptable, noEncoding)
		return
	}
	var f *os.File
	err = u.AsFS(func() (err error) {
		f, err = openRegular(p, false)
		return err
	})
	if err != nil {
		httpError(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		httpError(w, pathErr("stat", p, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}); cd != "" {
		h.Set("Content-Disposition", cd)
	}
	h.Add("Vary", "Accept-Encoding")
	if enc == "gzip" && fi.Size() > 0 {
		h.Set("Content-Encoding", "gzip")
		h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		gz := gzip.NewWriter(w)
		if _, err := io.Copy(gz, f); err != nil {
			panic(http.ErrAbortHandler) // headers are out: reset the stream
		}
		if err := gz.Close(); err != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	// An empty file is sent as identity with Content-Length: 0, which the E2B
	// SDK checks for.
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// fileResult is one element of the POST /files response.
type fileResult struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// parseMode parses the octal "mode" query parameter.
func parseMode(v string) (mode uint32, ok bool, err error) {
	if v == "" {
		return 0, false, nil
	}
	m, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(v, "0o"), "0O"), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, false, invalidf("invalid mode %q: want octal permission bits such as 644", v)
	}
	return uint32(m), true, nil
}

// parseMetadata collects X-Metadata-<key> headers as user.e2b.<key> xattrs
// (key lowercased; printable ASCII; key ≤ 246 bytes; ≤ 4096 bytes in all;
// the first of duplicate keys wins).
func parseMetadata(h http.Header) (map[string]string, error) {
	const prefix = "x-metadata-"
	names := make([]string, 0, len(h))
	for k := range h {
		if len(k) >= len(prefix) && strings.EqualFold(k[:len(prefix)], prefix) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names) // canonical names first, so "first wins" is stable
	md := map[string]string{}
	total := 0
	for _, hk := range names {
		key := strings.ToLower(hk[len(prefix):])
		if key == "" {
			return nil, invalidf("metadata header %q has an empty key", hk)
		}
		if _, dup := md[key]; dup || len(h[hk]) == 0 {
			continue
		}
		val := h[hk][0]
		if !printable(key) || !printable(val) {
			return nil, invalidf("metadata %q: keys and values must be printable ascii", key)
		}
		if len(key) > maxMetaKey {
			return nil, invalidf("metadata key %q is longer than %d bytes", key[:32]+"...", maxMetaKey)
		}
		if total += len(key) + len(val); total > maxMetaTotal {
			return nil, invalidf("metadata is larger than %d bytes", maxMetaTotal)
		}
		md[key] = val
	}
	return md, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestBody undoes the request's Content-Encoding.
func requestBody(r *http.Request) (io.Reader, error) {
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(bufio.NewReaderSize(r.Body, 64<<10))
		if err != nil {
			return nil, invalidf("bad gzip request body: %w", err)
		}
		return gz, nil
	default:
		return nil, &statusError{http.StatusUnsupportedMediaType, "unsupported content encoding " + strconv.Quote(ce) + ", supported: [identity, gzip]"}
	}
}

// statusError is an HTTP error with a set status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func writeHTTPError(w http.ResponseWriter, err error) {
	var se *statusError
	if errors.As(err, &se) {
		jsonError(w, se.status, se.msg)
		return
	}
	httpError(w, err)
}

// writeFiles handles POST /files.
func (s *Service) writeFiles(w http.ResponseWriter, r *http.Request) {
	u, err := s.httpUser(r)
	if err != nil {
		httpError(w, err)
		return
	}
	q := r.URL.Query()
	mode, hasMode, err := parseMode(q.Get("mode"))
	if err != nil {
		httpError(w, err)
		return
	}
	md, err := parseMetadata(r.Header)
	if err != nil {
		httpError(w, err)
		return
	}
	body, err := requestBody(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	atomic, err := parseAtomic(q.Get("atomic"))
	if err != nil {
		httpError(w, err)
		return
	}
	up := &upload{s: s, u: u, mode: mode, hasMode: hasMode, md: md, atomic: atomic, seen: map[string]bool{}}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		err = up.multipart(body, params["boundary"], q.Get("path"))
	} else {
		if q.Get("path") == "" {
			httpError(w, invalidf("path query parameter is required for a non-multipart upload"))
			return
		}
		err = up.single(body, q.Get("path"))
	}
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	writeJSON(w, up.results)
}

// parseAtomic parses the "atomic" query parameter (Warden's extension):
// true makes the upload all-or-nothing through temporary files.
func parseAtomic(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, invalidf("invalid atomic %q: want true or false", v)
}

// upload is one POST /files. It writes in one of two ways:
//
//   - In place (the default, as envd does): each file is opened, truncated
//     and written, so it keeps its inode, owner and hard links, and a
//     watcher of its directory sees the CREATE (for a new file) and WRITE
//     events an ordinary write makes. Missing parent directories are made
//     even where the user may not create them: the agent makes them as root
//     and hands them to the user, as envd does. A failed write removes a
//     file it created (and the directories made for it); an existing file
//     is left as far as it was written, and the files of earlier parts stay
//     written, as with envd.
//   - Atomic (atomic=true, what Warden's own API asks for): every file is
//     written to a temporary file first and renamed into place only when
//     the whole body has been read, so a failed upload changes nothing, not
//     even for the earlier parts of a multipart body. Parents are made as
//     the user only.
//
// Every file operation runs as the acting user (AsFS); only the making of
// a parent directory the user may not make runs as the agent.
type upload struct {
	s       *Service
	u       *sysuser.User
	mode    uint32
	hasMode bool
	md      map[string]string
	atomic  bool

	seen    map[string]bool
	pending []pendingFile
	results []fileResult
}

type pendingFile struct {
	tmp, target string
	made        *madeDirs // directories made for it
}

func (up *upload) single(body io.Reader, p string) error {
	if err := up.add(body, up.s.resolve(up.u, p)); err != nil {
		up.abort()
		return err
	}
	return up.commit()
}

func (up *upload) multipart(body io.Reader, boundary, queryPath string) error {
	if boundary == "" {
		return invalidf("multipart body without boundary")
	}
	mr := multipart.NewReader(body, boundary)
	err := func() error {
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return invalidf("read multipart body: %w", err)
			}
			if part.FormName() != "file" {
				continue // NextPart drains it
			}
			if len(up.results) >= maxParts {
				return invalidf("more than %d file parts", maxParts)
			}
			p := queryPath
			if p == "" {
				// The raw filename: Part.FileName drops the directories.
				_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				if err != nil {
					return invalidf("bad content-disposition of a file part: %w", err)
				}
				if p = params["filename"]; p == "" {
					return invalidf("file part without a filename and no path query parameter")
				}
			}
			if err := up.add(part, up.s.resolve(up.u, p)); err != nil {
				return err
			}
		}
		if len(up.results) == 0 {
			return invalidf("no file parts in request")
		}
		return nil
	}()
	if err != nil {
		up.abort()
		return err
	}
	return up.commit()
}

// add writes one file: in place, or to its temporary file when atomic.
func (up *upload) add(r io.Reader, dst string) error {
	if up.seen[dst] {
		return invalidf("two files in one upload resolve to %s", dst)
	}
	up.seen[dst] = true
	var tg target
	err := up.u.AsFS(func() (err error) {
		tg, err = resolveTarget(dst, up.mode, up.hasMode)
		return err
	})
	if err != nil {
		return err
	}
	if tg.path != dst {
		if up.seen[tg.path] {
			return invalidf("two files in one upload resolve to %s", tg.path)
		}
		up.seen[tg.path] = true
	}
	var made *madeDirs
	if tg.kind == targetMissing {
		if made, err = makeParents(up.u, path.Dir(tg.path), !up.atomic); err != nil {
			return err
		}
	}
	if up.atomic {
		var tmp string
		err = up.u.AsFS(func() (err error) {
			tmp, err = writeTemp(tg.path, r, tg.mode, up.md)
			return err
		})
		if err != nil {
			made.undo()
			return up.s.diskFull(err, path.Dir(tg.path))
		}
		up.pending = append(up.pending, pendingFile{tmp: tmp, target: tg.path, made: made})
	} else {
		up.s.gens.bump(tg.path)
		err = up.u.AsFS(func() error { return writeInPlace(dst, tg, r, up.hasMode, up.md) })
		if err != nil {
			made.undo()
			return up.s.diskFull(err, path.Dir(tg.path))
		}
		made.release()
	}
	up.results = append(up.results, fileResult{Path: dst, Name: path.Base(dst), Type: "file", Metadata: up.md})
	return nil
}

func (up *upload) commit() error {
	for i, pf := range up.pending {
		if err := up.u.AsFS(func() error { return commit(pf.tmp, pf.target) }); err != nil {
			up.pending = up.pending[i+1:]
			up.abort()
			return err
		}
		pf.made.release()
	}
	up.pending = nil
	return nil
}

// abort removes the temporary files and the directories made for them.
func (up *upload) abort() {
	for i := len(up.pending) - 1; i >= 0; i-- {
		pf := up.pending[i]
		up.u.AsFS(func() error { return unix.Unlink(pf.tmp) })
		pf.made.undo()
	}
	up.pending = nil
}

// targetKind is what a write finds at its destination.
type targetKind int

const (
	targetMissing targetKind = iota // nothing: the file is created
	targetRegular                   // a regular file: overwritten
	targetLink                      // a dangling symlink: replaced by the file
)

// target is where a write lands.
type target struct {
	path string
	kind targetKind
	mode uint32 // permission bits the file gets
}

// resolveTarget decides where a write to dst lands and with which mode. An
// existing symlink is written through (like open(2) would); a dangling one
// is replaced. Directories and special files are refused. The mode is the
// requested one, else the existing file's permission bits (without
// setuid/setgid/sticky, which a write clears too), else 0644. Run it inside
// AsFS.
func resolveTarget(dst string, mode uint32, hasMode bool) (target, error) {
	tg := target{path: dst}
	var st unix.Stat_t
	err := unix.Lstat(dst, &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if real, rerr := filepath.EvalSymlinks(dst); rerr == nil {
			tg.path = real
			err = unix.Lstat(tg.path, &st)
		}
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		tg.kind, tg.mode = targetMissing, 0o644
	case err != nil:
		if errors.Is(err, unix.ENOTDIR) {
			return target{}, invalidf("write %s: a parent is not a directory", dst)
		}
		return target{}, pathErr("write", dst, err)
	default:
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			tg.kind, tg.mode = targetRegular, st.Mode&0o777
		case unix.S_IFLNK: // dangling symlink: replace it
			tg.kind, tg.mode = targetLink, 0o644
		case unix.S_IFDIR:
			return target{}, invalidf("write %s: path is a directory", dst)
		default:
			return target{}, invalidf("write %s: not a regular file", dst)
		}
	}
	if hasMode {
		tg.mode = mode
	}
	return tg, nil
}

// writeInPlace writes r into tg the way envd does: the file is opened
// (created when missing), truncated and written. Its mode is set when it is
// new or a mode was asked for; its user.e2b.* metadata is replaced by md. A
// file it created is removed again when the write fails. Errors name dst.
// Run it inside AsFS.
func writeInPlace(dst string, tg target, r io.Reader, setMode bool, md map[string]string) (err error) {
	flags := unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	created := tg.kind != targetRegular
	if tg.kind == targetLink {
		if err := unix.Unlink(tg.path); err != nil && !errors.Is(err, unix.ENOENT) {
			return pathErr("write", dst, err)
		}
	}
	if created {
		flags |= unix.O_CREAT | unix.O_EXCL
	} else {
		flags |= unix.O_TRUNC
	}
	fd, err := unix.Open(tg.path, flags, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
			return invalidf("write %s: not a regular file", dst)
		}
		return pathErr("write", dst, err)
	}
	f := os.NewFile(uintptr(fd), tg.path)
	defer func() {
		if err != nil {
			f.Close()
			if created {
				unix.Unlink(tg.path)
			}
		}
	}()
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err != nil {
		return pathErr("stat", dst, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		created = false // not ours to remove
		return invalidf("write %s: not a regular file", dst)
	}
	if fl, ferr := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); ferr == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	if created || setMode {
		if err = unix.Fchmod(fd, tg.mode&0o7777); err != nil {
			return pathErr("chmod", dst, err)
		}
	}
	if err = replaceMetadata(fd, md); err != nil {
		return pathErr("set metadata on", dst, err)
	}
	if _, err = io.Copy(f, r); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Path == tg.path {
			return pathErr("write", dst, err)
		}
		return invalidf("read request body for %s: %w", dst, err)
	}
	if err = f.Close(); err != nil {
		f = nil
		return pathErr("close", dst, err)
	}
	return nil
}

// replaceMetadata sets the file's user.e2b.* xattrs to md, removing the
// others: each upload replaces the metadata (envd).
func replaceMetadata(fd int, md map[string]string) error {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if sz, serr := unix.Flistxattr(fd, nil); serr == nil {
			buf = make([]byte, sz+64)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	switch {
	case err == nil:
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if strings.HasPrefix(name, metaPrefix) {
				if _, keep := md[strings.TrimPrefix(name, metaPrefix)]; !keep {
					if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
						return err
					}
				}
			}
		}
	case errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP):
		// No xattrs listed here: nothing to remove; setting them says
		// whether they are supported at all.
	default:
		return err
	}
	for k, v := range md {
		if err := unix.Fsetxattr(fd, metaPrefix+k, []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}
