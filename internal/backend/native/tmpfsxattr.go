package native

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errTmpfsNoUserXattr: the kernel's tmpfs refuses user.* extended
// attributes (before Linux 6.6, so on Debian 12's 6.1).
var errTmpfsNoUserXattr = errors.New("this kernel's tmpfs does not hold user.* extended attributes (Linux 6.6 and later do)")

// tmpfsUserXattr checks that a tmpfs holds user.* extended attributes. The
// in-memory writable layer is a tmpfs under an overlay mounted with
// userxattr (it is mounted in the sandbox's user namespace), whose opaque
// directories are user.overlay.* attributes of the upper directory: without
// them a template directory removed and made again loses what is written
// into it. The tmpfs is a detached mount (fsopen/fsmount, never attached
// anywhere), gone when its descriptors close.
func tmpfsUserXattr() error {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "size", "64k"); err != nil {
		return fmt.Errorf("fsconfig tmpfs: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("fsconfig create tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return fmt.Errorf("fsmount tmpfs: %w", err)
	}
	defer unix.Close(mfd)
	fd, err := unix.Openat(mfd, "probe", unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create a file on tmpfs: %w", err)
	}
	defer unix.Close(fd)
	switch err := unix.Fsetxattr(fd, "user.warden", []byte("1"), 0); {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP):
		return errTmpfsNoUserXattr
	default:
		return fmt.Errorf("set a user.* attribute on tmpfs: %w", err)
	}
}
