package ginit

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sudo"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
)

// mountSudo binds the agent binary (AgentPath, in the scaffold layer)
// read-only, nosuid and nodev at sudo.ShimPath: the sandbox's sudo program
// (package sudo), never a copy in the writable layer. The mount point is
// opened without following symlinks (sbinit.FileMountpoint) and mounted on
// through its descriptor; a template's own /usr/local/bin/sudo is covered
// while sudo is on. Hiding Dir later leaves the bind in place.
func mountSudo() error {
	target, err := sbinit.FileMountpoint("/", sudo.ShimPath)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	p := "/proc/self/fd/" + strconv.Itoa(target)
	if err := unix.Mount(AgentPath, p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", sudo.ShimPath, err)
	}
	if err := unix.Mount("", sudo.ShimPath, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		unix.Unmount(sudo.ShimPath, unix.MNT_DETACH)
		return fmt.Errorf("read-only %s: %w", sudo.ShimPath, err)
	}
	return nil
}
