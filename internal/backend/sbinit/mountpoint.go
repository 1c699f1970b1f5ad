package sbinit

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafeMountpoint says a file mount point holds a symlink, or something
// other than a directory, on its way, or is not a regular file itself.
var ErrUnsafeMountpoint = errors.New("unsafe mount point")

// FileMountpoint opens root/rel as the mount point of a file bind mount
// without following a symlink anywhere below root (the template is
// untrusted; isolation notes: CVE-2021-30465, CVE-2024-45310): every
// directory on the way must be a real directory (a missing one is made,
// 0755, relative to its verified parent) and rel itself a regular file (a
// missing one is made empty with mode 0, so that nothing can run it should
// the mount ever be missing). It returns an O_PATH descriptor of the file to
// mount on, or an error wrapping ErrUnsafeMountpoint. Inits call it before
// any process of the sandbox runs.
func FileMountpoint(root, rel string) (int, error) {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	for _, c := range parts {
		if c == "" || c == "." || c == ".." {
			return -1, fmt.Errorf("bad mount point %q", rel)
		}
	}
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", rel, err)
	}
	defer func() { unix.Close(dfd) }()
	for _, c := range parts[:len(parts)-1] {
		fd, err := openDirNoFollow(dfd, c)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dfd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("mount point %s: create %s: %w", rel, c, err)
			}
			fd, err = openDirNoFollow(dfd, c)
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("mount point %s: %s is a symlink or not a directory: %w", rel, c, ErrUnsafeMountpoint)
		}
		if err != nil {
			return -1, fmt.Errorf("mount point %s: %s: %w", rel, c, err)
		}
		unix.Close(dfd)
		dfd = fd
	}
	name := parts[len(parts)-1]
	fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
	case !errors.Is(err, unix.EEXIST):
		return -1, fmt.Errorf("mount point %s: create: %w", rel, err)
	}
	fd, err = unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount point %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("mount point %s is not a regular file (mode %#o): %w", rel, st.Mode, ErrUnsafeMountpoint)
	}
	return fd, nil
}

// openDirNoFollow opens the directory name under dfd; a symlink there
// fails with ENOTDIR (O_PATH|O_NOFOLLOW opens the link itself, which
// O_DIRECTORY then refuses).
func openDirNoFollow(dfd int, name string) (int, error) {
	return unix.Openat(dfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
