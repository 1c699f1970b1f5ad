package sbinit

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// DirMountpoint opens root/rel as the mount point of a directory mount (a
// volume) without following a symlink anywhere below root: every
// component must be a real directory, a missing one is made (0755)
// relative to its verified parent. It returns an O_PATH descriptor of the
// directory, or an error wrapping ErrUnsafeMountpoint when the template
// planted a symlink or a non-directory on the way (CVE-2021-30465-style
// races need a process in the sandbox, and inits call this before any
// runs).
func DirMountpoint(root, rel string) (int, error) {
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
	for _, c := range parts {
		fd, err := openDirNoFollow(dfd, c)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dfd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(dfd)
				return -1, fmt.Errorf("mount point %s: create %s: %w", rel, c, err)
			}
			fd, err = openDirNoFollow(dfd, c)
		}
		unix.Close(dfd)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("mount point %s: %s is a symlink or not a directory: %w", rel, c, ErrUnsafeMountpoint)
		}
		if err != nil {
			return -1, fmt.Errorf("mount point %s: %s: %w", rel, c, err)
		}
		dfd = fd
	}
	return dfd, nil
}
