package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Stats counts what [ApplyLayer] extracted from a layer.
type Stats struct {
	Files          int   // regular files
	Dirs           int   // directory entries (implicitly created parents are not counted)
	Symlinks       int   // symbolic links
	Hardlinks      int   // hard links
	FIFOs          int   // named pipes
	Whiteouts      int   // ".wh.NAME" entries, stored as character devices 0/0
	OpaqueDirs     int   // ".wh..wh..opq" entries, stored as user.overlay.opaque=y
	SkippedDevices int   // block/character device entries (and hard links to them), never created
	SkippedXattrs  int   // extended attributes that were not applied
	Bytes          int64 // bytes of regular file content written
	// Entries counts the tar entries read plus the parent directories
	// created for them that no entry named: what images.max_entries bounds.
	Entries int
}

func (s *Stats) add(o Stats) {
	s.Files += o.Files
	s.Dirs += o.Dirs
	s.Symlinks += o.Symlinks
	s.Hardlinks += o.Hardlinks
	s.FIFOs += o.FIFOs
	s.Whiteouts += o.Whiteouts
	s.OpaqueDirs += o.OpaqueDirs
	s.SkippedDevices += o.SkippedDevices
	s.SkippedXattrs += o.SkippedXattrs
	s.Bytes += o.Bytes
	s.Entries += o.Entries
}

// ErrUnsafeEntry is wrapped by the errors [ApplyLayer] returns for entries
// that would reach outside the layer directory: names or hard link targets
// with ".." components that escape it, or paths that go through a symbolic
// link or a non-directory.
var ErrUnsafeEntry = errors.New("unsafe layer entry")

const (
	whiteoutPrefix     = ".wh."
	opaqueMarker       = ".wh..wh..opq"
	overlayXattrPrefix = "user.overlay."
	opaqueXattr        = "user.overlay.opaque"
	paxXattrPrefix     = "SCHILY.xattr."
	paxSparsePrefix    = "GNU.sparse."

	// maxID is the largest uid/gid accepted; (uid_t)-1 means "unchanged"
	// to chown and is refused.
	maxID = 1<<32 - 2
)

// noOpenat2 disables openat2(2) for resolving multi-component paths; paths
// are then walked one component at a time with O_NOFOLLOW. It is set when the
// kernel (or a seccomp filter) refuses openat2; tests set it to exercise the
// fallback.
var noOpenat2 atomic.Bool

// ApplyLayer extracts the uncompressed layer tar stream r into dir, which
// must be an existing, empty directory, producing an overlayfs lower layer
// for a mount with the "userxattr" option.
//
// Whiteouts (".wh.NAME") become character devices 0/0 named NAME and opaque
// markers (".wh..wh..opq") set user.overlay.opaque=y on their directory; any
// other ".wh."-prefixed name is an error. Regular files, directories,
// symbolic links, hard links (to entries extracted earlier from the same
// layer) and FIFOs are created with the header's ownership, mode (including
// setuid, setgid and sticky bits) and times; directory times are set once
// all entries are written. Block and character devices are skipped. Only
// "user.*" extended attributes from PAX records are applied, except
// "user.overlay.*", and only on regular files and directories.
//
// Entry names are cleaned and made relative to dir; a name or hard link
// target that escapes dir, or a path through a symbolic link, is refused with
// an error wrapping [ErrUnsafeEntry]. Sparse entries are refused too. A later
// entry replaces an earlier one with the same name, except that a directory
// over a directory only updates its metadata.
//
// On error, dir may hold a partial extraction and should be discarded.
func ApplyLayer(dir string, r io.Reader) (Stats, error) {
	return applyLayer(dir, r, -1)
}

// applyLayer is [ApplyLayer] stopping with a [*LimitError] once more than
// maxEntries entries (Stats.Entries) are made; maxEntries < 0 is no limit.
func applyLayer(dir string, r io.Reader, maxEntries int64) (Stats, error) {
	a, err := newApplier(dir)
	if err != nil {
		return Stats{}, err
	}
	defer a.close()
	a.maxEntries = maxEntries

	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return a.stats, fmt.Errorf("read layer tar: %w", err)
		}
		if err := a.count(); err != nil {
			return a.stats, err
		}
		if err := a.apply(hdr, tr); err != nil {
			if a.limitErr != nil {
				return a.stats, a.limitErr
			}
			return a.stats, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	if err := a.finish(); err != nil {
		return a.stats, err
	}
	return a.stats, nil
}

type times [2]unix.Timespec

type applier struct {
	root     int // O_PATH descriptor of the layer directory
	stats    Stats
	buf      []byte
	dirTimes map[string]times // directory times, applied at the end
	devices  map[string]bool  // skipped device entries, for hard links to them

	// One cached O_PATH descriptor of a parent directory: entries of a
	// layer tar are usually grouped by directory.
	cacheName string
	cacheFd   int

	maxEntries int64 // limit of stats.Entries; < 0: none
	limitErr   *LimitError
}

// count counts one more entry (a tar entry, or a directory made for one)
// against maxEntries.
func (a *applier) count() error {
	a.stats.Entries++
	if a.maxEntries >= 0 && int64(a.stats.Entries) > a.maxEntries {
		a.limitErr = &LimitError{Limit: LimitEntries, Max: a.maxEntries}
		return a.limitErr
	}
	return nil
}

func newApplier(dir string) (*applier, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open layer dir: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat layer dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("layer dir %s is not a directory", dir)
	}
	names, err := f.Readdirnames(1)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read layer dir: %w", err)
	}
	if len(names) > 0 {
		return nil, fmt.Errorf("layer dir %s is not empty", dir)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open layer dir: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	return &applier{
		root:     fd,
		buf:      make([]byte, 256<<10),
		dirTimes: map[string]times{},
		devices:  map[string]bool{},
		cacheFd:  -1,

		maxEntries: -1,
	}, nil
}

func (a *applier) close() {
	a.dropCache()
	unix.Close(a.root)
}

func (a *applier) dropCache() {
	if a.cacheFd >= 0 {
		unix.Close(a.cacheFd)
	}
	a.cacheFd, a.cacheName = -1, ""
}

// cleanName turns a tar entry name (or hard link target) into a clean path
// relative to the layer root ("." for the root itself). Leading slashes are
// dropped; names that escape the root are refused.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains a NUL byte")
	}
	rel := path.Clean(strings.TrimLeft(name, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %q escapes the layer directory", ErrUnsafeEntry, name)
	}
	return rel, nil
}

func splitRel(rel string) (parent, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

func checkID(what string, id int) error {
	if id < 0 || int64(id) > maxID {
		return fmt.Errorf("invalid %s %d", what, id)
	}
	return nil
}

func entryTimes(hdr *tar.Header) times {
	conv := func(t time.Time) unix.Timespec {
		if t.IsZero() {
			t = time.Unix(0, 0)
		}
		return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
	}
	mtime := conv(hdr.ModTime)
	atime := mtime
	if !hdr.AccessTime.IsZero() {
		atime = conv(hdr.AccessTime)
	}
	return times{atime, mtime}
}

func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxSparsePrefix) {
			return true
		}
	}
	return false
}

func (a *applier) apply(hdr *tar.Header, tr io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if err := checkID("uid", hdr.Uid); err != nil {
		return err
	}
	if err := checkID("gid", hdr.Gid); err != nil {
		return err
	}
	parent, base := splitRel(rel)
	if parent != "." {
		for comp := range strings.SplitSeq(parent, "/") {
			if strings.HasPrefix(comp, whiteoutPrefix) {
				return fmt.Errorf("whiteout name %q used as a parent directory", comp)
			}
		}
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(hdr, parent, base)
	}
	if rel == "." && hdr.Typeflag != tar.TypeDir {
		return errors.New("only a directory may name the layer root")
	}
	if isSparse(hdr) {
		return errors.New("sparse files are not supported")
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.dir(hdr, rel, parent, base)
	case tar.TypeReg, tar.TypeCont:
		return a.file(hdr, tr, parent, base)
	case tar.TypeSymlink:
		return a.symlink(hdr, parent, base)
	case tar.TypeLink:
		return a.hardlink(hdr, rel, parent, base)
	case tar.TypeFifo:
		return a.fifo(hdr, parent, base)
	case tar.TypeChar, tar.TypeBlock:
		// Device nodes are never created on the host. The entry still
		// replaces whatever an earlier entry put at this name.
		pfd, err := a.dirFd(parent)
		if err != nil {
			return err
		}
		if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
			return err
		}
		a.devices[rel] = true
		a.stats.SkippedDevices++
		a.stats.SkippedXattrs += countXattrs(hdr)
		return nil
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
}

// describe turns the error of resolving rel beneath the layer root into a
// readable one, naming the component that is a symbolic link or not a
// directory.
func (a *applier) describe(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// Find the culprit. Every prefix before it is a real directory, so
		// these lookups do not follow symbolic links.
		prefix := ""
		for comp := range strings.SplitSeq(rel, "/") {
			prefix = path.Join(prefix, comp)
			var st unix.Stat_t
			if unix.Fstatat(a.root, prefix, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				break
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				continue
			case unix.S_IFLNK:
				return fmt.Errorf("%w: path %q goes through symbolic link %q", ErrUnsafeEntry, rel, prefix)
			default:
				return fmt.Errorf("%w: path %q goes through non-directory %q", ErrUnsafeEntry, rel, prefix)
			}
		}
		return fmt.Errorf("%w: path %q goes through a symbolic link or non-directory", ErrUnsafeEntry, rel)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: path %q leaves the layer directory", ErrUnsafeEntry, rel)
	}
	return &os.PathError{Op: "open", Path: rel, Err: err}
}

// openBeneath opens the directory rel (a clean relative path without ".."
// components) beneath dirfd, refusing symbolic links anywhere in the path.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	flags |= unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		how := unix.OpenHow{
			Flags: uint64(flags),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
				unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		}
		for range 16 {
			fd, err := unix.Openat2(dirfd, rel, &how)
			switch err {
			case nil:
				return fd, nil
			case unix.EINTR, unix.EAGAIN:
				continue
			case unix.ENOSYS, unix.EPERM:
				// No openat2 (old kernel or seccomp filter): walk.
				noOpenat2.Store(true)
			default:
				return -1, err
			}
			break
		}
	}
	// Walk one component at a time. Components are never ".." (rel is
	// clean and relative) and O_NOFOLLOW|O_DIRECTORY refuses symbolic
	// links, so every step stays beneath dirfd.
	cur := dirfd
	for comp := range strings.SplitSeq(rel, "/") {
		if comp == ".." {
			return -1, unix.EXDEV
		}
		fd, err := unix.Openat(cur, comp, flags, 0)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return -1, unix.ENOTDIR
		}
		cur = fd
	}
	if cur == dirfd {
		// rel was "."; hand out a fresh descriptor.
		return unix.Openat(dirfd, ".", flags, 0)
	}
	return cur, nil
}

// dirFd returns an O_PATH descriptor of the directory rel beneath the layer
// root, creating missing directories (root:root 0755). The descriptor is
// owned by the applier and valid until the next call.
func (a *applier) dirFd(rel string) (int, error) {
	if rel == "." {
		return a.root, nil
	}
	if a.cacheFd >= 0 && a.cacheName == rel {
		return a.cacheFd, nil
	}
	fd, err := a.mkdirAll(rel)
	if err != nil {
		return -1, err
	}
	a.dropCache()
	a.cacheName, a.cacheFd = rel, fd
	return fd, nil
}

func (a *applier) mkdirAll(rel string) (int, error) {
	fd, err := openBeneath(a.root, rel, unix.O_PATH)
	if err == nil {
		return fd, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return -1, a.describe(rel, err)
	}
	cur := a.root
	done := ""
	for comp := range strings.SplitSeq(rel, "/") {
		done = path.Join(done, comp)
		next, err := openBeneath(cur, comp, unix.O_PATH)
		if errors.Is(err, unix.ENOENT) {
			err = a.count()
			if err == nil {
				err = unix.Mkdirat(cur, comp, 0o755)
			}
			if err == nil {
				err = unix.Fchmodat(cur, comp, 0o755, 0)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openBeneath(cur, comp, unix.O_PATH)
			}
		}
		if cur != a.root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, a.describe(done, err)
		}
		cur = next
	}
	return cur, nil
}

// removeExisting removes whatever is at base in the directory pfd (rel is
// its path from the root). If keepDir is set and it is a directory, it is
// kept and isDir reports true.
func (a *applier) removeExisting(pfd int, rel, base string, keepDir bool) (isDir bool, err error) {
	delete(a.devices, rel)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "lstat", Path: rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, base, 0); err != nil {
			return false, &os.PathError{Op: "unlink", Path: rel, Err: err}
		}
		return false, nil
	}
	if keepDir {
		return true, nil
	}
	// Forget state about anything below the directory.
	if a.cacheName == rel || strings.HasPrefix(a.cacheName, rel+"/") {
		a.dropCache()
	}
	for name := range a.dirTimes {
		if name == rel || strings.HasPrefix(name, rel+"/") {
			delete(a.dirTimes, name)
		}
	}
	for name := range a.devices {
		if strings.HasPrefix(name, rel+"/") {
			delete(a.devices, name)
		}
	}
	if err := removeAllAt(pfd, base); err != nil {
		return false, fmt.Errorf("remove %q: %w", rel, err)
	}
	return false, nil
}

// removeAllAt removes name (a directory or anything else) in dirfd without
// following symbolic links.
func removeAllAt(dirfd int, name string) error {
	for range 8 {
		err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTDIR):
			return unix.Unlinkat(dirfd, name, 0)
		case !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST):
			return err
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		names, err := f.Readdirnames(-1)
		if err != nil {
			f.Close()
			return err
		}
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				f.Close()
				return err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = removeAllAt(fd, n)
			} else {
				err = unix.Unlinkat(fd, n, 0)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				f.Close()
				return err
			}
		}
		f.Close()
	}
	return fmt.Errorf("directory %q keeps changing while being removed", name)
}

func countXattrs(hdr *tar.Header) int {
	n := 0
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattrPrefix) {
			n++
		}
	}
	return n
}

// setXattrs applies the allowed extended attributes of hdr to the open file
// or directory fd.
func (a *applier) setXattrs(fd int, hdr *tar.Header) error {
	var keys []string
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattrPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		name := strings.TrimPrefix(k, paxXattrPrefix)
		if !strings.HasPrefix(name, "user.") || strings.HasPrefix(name, overlayXattrPrefix) {
			a.stats.SkippedXattrs++
			continue
		}
		err := unix.Fsetxattr(fd, name, []byte(hdr.PAXRecords[k]), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP):
			a.stats.SkippedXattrs++
		default:
			return fmt.Errorf("set xattr %q: %w", name, err)
		}
	}
	return nil
}

// setOwnerMode sets ownership, then the mode (chown clears setuid/setgid).
func setOwnerMode(fd int, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

func setTimes(pfd int, base string, ts times) error {
	if err := unix.UtimesNanoAt(pfd, base, ts[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

func (a *applier) dir(hdr *tar.Header, rel, parent, base string) error {
	var fd int
	var err error
	if rel == "." {
		fd, err = unix.Openat(a.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		var pfd int
		pfd, err = a.dirFd(parent)
		if err != nil {
			return err
		}
		var isDir bool
		if isDir, err = a.removeExisting(pfd, rel, base, true); err != nil {
			return err
		}
		if !isDir {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return fmt.Errorf("mkdir: %w", err)
			}
		}
		fd, err = unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return a.describe(rel, err)
	}
	defer unix.Close(fd)
	if err := setOwnerMode(fd, hdr); err != nil {
		return err
	}
	if err := a.setXattrs(fd, hdr); err != nil {
		return err
	}
	a.dirTimes[rel] = entryTimes(hdr)
	a.stats.Dirs++
	return nil
}

func (a *applier) file(hdr *tar.Header, r io.Reader, parent, base string) error {
	pfd, err := a.dirFd(parent)
	if err != nil {
		return err
	}
	rel := path.Join(parent, base)
	if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
		return err
	}
	// O_EXCL|O_NOFOLLOW: the name was just removed, so this creates a new
	// file and never opens anything an earlier entry left behind.
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return a.describe(rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{r}, a.buf)
	a.stats.Bytes += n
	if err != nil {
		f.Close()
		return fmt.Errorf("write file: %w", err)
	}
	if err := setOwnerMode(fd, hdr); err != nil {
		f.Close()
		return err
	}
	if err := a.setXattrs(fd, hdr); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close file: %w", err)
	}
	if err := setTimes(pfd, base, entryTimes(hdr)); err != nil {
		return err
	}
	a.stats.Files++
	return nil
}

func (a *applier) symlink(hdr *tar.Header, parent, base string) error {
	pfd, err := a.dirFd(parent)
	if err != nil {
		return err
	}
	rel := path.Join(parent, base)
	if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
		return err
	}
	// The target is stored verbatim: it is only ever resolved inside the
	// sandbox, never by this package.
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("lchown: %w", err)
	}
	if err := setTimes(pfd, base, entryTimes(hdr)); err != nil {
		return err
	}
	a.stats.SkippedXattrs += countXattrs(hdr)
	a.stats.Symlinks++
	return nil
}

func (a *applier) hardlink(hdr *tar.Header, rel, parent, base string) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	if target == "." {
		return errors.New("hard link to the layer root")
	}
	if target == rel {
		return errors.New("hard link to itself")
	}
	if a.devices[target] {
		// Link to a skipped device: skip it as well.
		pfd, err := a.dirFd(parent)
		if err != nil {
			return err
		}
		if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
			return err
		}
		a.devices[rel] = true
		a.stats.SkippedDevices++
		return nil
	}
	tparent, tbase := splitRel(target)
	tfd := a.root
	if tparent != "." {
		tfd, err = openBeneath(a.root, tparent, unix.O_PATH)
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hard link target %q is not an entry of this layer", hdr.Linkname)
		}
		if err != nil {
			return fmt.Errorf("hard link target: %w", a.describe(tparent, err))
		}
		defer unix.Close(tfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hard link target %q is not an entry of this layer", hdr.Linkname)
		}
		return fmt.Errorf("hard link target: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hard link target %q is a directory", hdr.Linkname)
	}
	pfd, err := a.dirFd(parent)
	if err != nil {
		return err
	}
	if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
		return err
	}
	// flags 0: link the target itself, even if it is a symbolic link.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hard link target %q vanished (replaced by this entry)", hdr.Linkname)
		}
		return fmt.Errorf("link: %w", err)
	}
	a.stats.Hardlinks++
	return nil
}

func (a *applier) fifo(hdr *tar.Header, parent, base string) error {
	pfd, err := a.dirFd(parent)
	if err != nil {
		return err
	}
	rel := path.Join(parent, base)
	if _, err := a.removeExisting(pfd, rel, base, false); err != nil {
		return err
	}
	if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
		return fmt.Errorf("mkfifo: %w", err)
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("lchown: %w", err)
	}
	if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := setTimes(pfd, base, entryTimes(hdr)); err != nil {
		return err
	}
	a.stats.SkippedXattrs += countXattrs(hdr)
	a.stats.FIFOs++
	return nil
}

func (a *applier) whiteout(hdr *tar.Header, parent, base string) error {
	if base == opaqueMarker {
		// Make sure the directory exists, then mark it opaque. A later
		// entry for the directory itself keeps the attribute.
		if _, err := a.dirFd(parent); err != nil {
			return err
		}
		var fd int
		var err error
		if parent == "." {
			fd, err = unix.Openat(a.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		} else {
			fd, err = openBeneath(a.root, parent, unix.O_RDONLY)
		}
		if err != nil {
			return a.describe(parent, err)
		}
		defer unix.Close(fd)
		if err := unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("mark %q opaque: %w", parent, err)
		}
		a.stats.OpaqueDirs++
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, whiteoutPrefix) {
		return fmt.Errorf("invalid whiteout name %q", base)
	}
	pfd, err := a.dirFd(parent)
	if err != nil {
		return err
	}
	rel := path.Join(parent, name)
	if _, err := a.removeExisting(pfd, rel, name, false); err != nil {
		return err
	}
	if err := unix.Mknodat(pfd, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("create whiteout: %w", err)
	}
	if err := unix.Fchownat(pfd, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("lchown whiteout: %w", err)
	}
	a.stats.Whiteouts++
	return nil
}

// finish sets directory times, now that nothing is written into them anymore.
func (a *applier) finish() error {
	a.dropCache()
	names := make([]string, 0, len(a.dirTimes))
	for name := range a.dirTimes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, rel := range names {
		ts := a.dirTimes[rel]
		if rel == "." {
			if err := setTimes(a.root, ".", ts); err != nil {
				return fmt.Errorf("layer root: %w", err)
			}
			continue
		}
		parent, base := splitRel(rel)
		pfd := a.root
		if parent != "." {
			fd, err := openBeneath(a.root, parent, unix.O_PATH)
			if err != nil {
				return fmt.Errorf("directory %q: %w", rel, a.describe(parent, err))
			}
			pfd = fd
		}
		var st unix.Stat_t
		err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = setTimes(pfd, base, ts)
		}
		if pfd != a.root {
			unix.Close(pfd)
		}
		if err != nil {
			return fmt.Errorf("directory %q: %w", rel, err)
		}
	}
	return nil
}
