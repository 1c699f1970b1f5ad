package nsinit

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend/sbinit"
)

// mountVolumes attaches each volume's detached mount (made by wardend:
// idmapped through the sandbox's user namespace, nosuid, nodev, read-only
// if asked) at its target under root, on a mount point opened without
// following symlinks. It runs before any process of the sandbox does. The
// fds are closed whatever happens.
func mountVolumes(root string, vols []Volume, fds []int) error {
	var err error
	for _, v := range vols {
		if v.Fd < 0 || v.Fd >= len(fds) {
			return fmt.Errorf("volume at %s: bad fd index", v.Target)
		}
		if err == nil {
			err = mountVolume(root, v, fds[v.Fd])
		}
		unix.Close(fds[v.Fd])
	}
	return err
}

func mountVolume(root string, v Volume, src int) error {
	target, err := sbinit.DirMountpoint(root, v.Target)
	if err != nil {
		return fmt.Errorf("volume at %s: %w", v.Target, err)
	}
	defer unix.Close(target)
	if err := unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount volume at %s: %w", v.Target, err)
	}
	return nil
}
