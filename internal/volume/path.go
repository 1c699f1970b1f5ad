package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags keep every lookup beneath the volume's root: no "..", no
// symlink (a sandbox may have planted any), no magic link, no other mount.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// CleanPath turns a path inside a volume ("/a/b", "a/b") into the form
// lookups use ("a/b"): no empty, ".", or ".." component, no NUL, at most
// 4096 bytes and 255 per component. "" and "/" (the root) are refused:
// only files are copied.
func CleanPath(p string) (string, error) {
	if len(p) > 4096 || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q", ErrBadPath, p)
	}
	rel := strings.Trim(p, "/")
	if rel == "" {
		return "", fmt.Errorf("%w: a file path is needed, not the volume's root", ErrBadPath)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." || len(c) > 255 {
			return "", fmt.Errorf("%w: %q: empty, \".\" and \"..\" components are refused", ErrBadPath, p)
		}
	}
	return rel, nil
}

func openat2(dirfd int, rel string, flags uint64, mode uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolveFlags})
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

func beneathErr(p string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s goes through a symlink or out of the volume", ErrBadPath, p)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %s: %w", ErrNotFoundPath, p, os.ErrNotExist)
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return fmt.Errorf("%w: %s: %w", ErrBadPath, p, err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// openBeneath opens the file at p (CleanPath form or not) below root for
// reading, never leaving root.
func openBeneath(root, p string) (*os.File, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open volume root: %w", err)
	}
	defer unix.Close(rfd)
	fd, err := openat2(rfd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, beneathErr(p, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// writeBeneath writes r to p below root through a temporary file renamed
// into place; missing parent directories are made (0755, owned uid:gid).
func writeBeneath(root, p string, r io.Reader, mode os.FileMode, uid, gid int) (n int64, err error) {
	rel, err := CleanPath(p)
	if err != nil {
		return 0, err
	}
	if mode == 0 {
		mode = 0o644
	}
	mode &= 0o777
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open volume root: %w", err)
	}
	defer func() { unix.Close(dfd) }()
	parts := strings.Split(rel, "/")
	for _, c := range parts[:len(parts)-1] {
		fd, err := openat2(dfd, c, unix.O_PATH|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dfd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return 0, fmt.Errorf("%s: create %s: %w", p, c, err)
			}
			if err := unix.Fchownat(dfd, c, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return 0, fmt.Errorf("%s: create %s: %w", p, c, err)
			}
			fd, err = openat2(dfd, c, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		if err != nil {
			return 0, beneathErr(p, err)
		}
		unix.Close(dfd)
		dfd = fd
	}
	name := parts[len(parts)-1]
	// The target, if it exists, must be a regular file (not a directory,
	// symlink, fifo or device).
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, fmt.Errorf("%w: %s exists and is not a regular file", ErrBadPath, p)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := ".warden-upload-" + hex.EncodeToString(rnd[:])
	fd, err := openat2(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(mode))
	if err != nil {
		return 0, beneathErr(p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if err := f.Chown(uid, gid); err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	if err := f.Chmod(mode); err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	if n, err = io.Copy(f, r); err != nil {
		return n, fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("write %s: %w", p, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return n, fmt.Errorf("write %s: %w", p, err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return n, fmt.Errorf("write %s: %w", p, err)
	}
	return n, nil
}
