package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// The sandbox's filesystems on the host.
//
// A template is read-only layers stacked per target: "/" and deeper targets
// such as "/usr" (the base template shares the host's /usr there). Each
// target becomes its own overlay in the sandbox, as in a native sandbox:
//
//   - "/": runsc serves one host directory tree as the sandbox's root through
//     its gofer, and puts gVisor's overlay over it with the writable layer in
//     memory (or a host file of the run directory), capped at the disk limit
//     (--overlay2=root:...,size=...). composeRoot builds that tree:
//     <dir>/rootfs is a read-only host overlayfs of the scaffold and the "/"
//     layers.
//   - every other target: the bundle bind-mounts its layers read-only at
//     /.warden/lower/<i> (the layer's directory itself, or <dir>/lower/<i>, a
//     read-only host overlayfs of several layers made by composeLower), and
//     the init mounts a gVisor overlay at the target with the writable layer
//     in a tmpfs capped at the disk limit (see package ginit), then unmounts
//     the lower mount points.
//
// The scaffold is a per-sandbox directory on top of the "/" layers that adds
// /.warden (the agent binary, its configuration, the mount points of the
// control directory and of the lower layers) and guarantees every deeper
// target is a real directory, not a symlink a template planted. Every host
// mount is read-only, nosuid and nodev, private (no propagation), attached
// with move_mount from a detached mount, and goes with one lazy unmount.
//
// The host overlays are mounted with userxattr: template layers keep overlay
// metadata (opaque directories) in user.overlay.*, the form the native
// backend's rootless overlays write when templates are built.

// layerTargets groups layers by target, in order of first appearance, with
// "/" first and parents before children (/usr before /usr/local).
func layerTargets(layers []backend.Layer) (targets []string, byTarget map[string][]string) {
	byTarget = map[string][]string{}
	for _, l := range layers {
		t := filepath.Clean(l.Target)
		if _, ok := byTarget[t]; !ok {
			targets = append(targets, t)
		}
		byTarget[t] = append(byTarget[t], l.Path)
	}
	slices.SortStableFunc(targets, func(a, b string) int {
		da, db := strings.Count(a, "/"), strings.Count(b, "/")
		if a == "/" {
			da = 0
		}
		if b == "/" {
			db = 0
		}
		return da - db
	})
	return targets, byTarget
}

// composeRoot mounts the read-only overlay of scaffold and the "/" layers at
// root.
func composeRoot(root, scaffold string, lowers []string) error {
	if len(lowers) == 0 {
		return errors.New("no root layer")
	}
	return attachOverlay(root, append([]string{scaffold}, lowers...))
}

// composeLower returns the host directory to bind into the sandbox for the
// layers of one deeper target: the layer itself, or a read-only overlay of
// several mounted at mnt.
func composeLower(mnt string, lowers []string) (string, error) {
	if len(lowers) == 1 {
		return lowers[0], nil
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return "", err
	}
	if err := attachOverlay(mnt, lowers); err != nil {
		return "", err
	}
	return mnt, nil
}

// attachOverlay mounts a read-only, private overlay of lowers at dir.
func attachOverlay(dir string, lowers []string) error {
	mfd, err := overlayMount(lowers)
	if err != nil {
		return err
	}
	err = unix.MoveMount(mfd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(mfd)
	if err != nil {
		return fmt.Errorf("attach overlay at %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		unmountAll(dir)
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// overlayMount returns a detached read-only overlay of lowers (top first).
func overlayMount(lowers []string) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	for _, l := range lowers {
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", l); err != nil {
			return -1, fmt.Errorf("overlay layer %s: %w", l, err)
		}
	}
	if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
		return -1, fmt.Errorf("overlay userxattr: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create overlay of %v: %w", lowers, err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay: %w", err)
	}
	return mfd, nil
}

// unmountAll detaches the mount at dir and everything below it.
func unmountAll(root string) error {
	for i := 0; i < 8; i++ {
		err := unix.Unmount(root, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more)
		case err != nil:
			return fmt.Errorf("unmount %s: %w", root, err)
		}
	}
	return nil
}

// buildScaffold fills the per-sandbox scaffold layer at dir. Directories it
// shares with the template's "/" layers (the root, the mount points of
// deeper targets) take the template's owner and mode, since the scaffold is
// the top layer and its directories' attributes win. nLower mount points
// are made under /.warden/lower.
func buildScaffold(dir, agent string, roots, targets []string, nLower int) error {
	like := func(rel string) error {
		p := filepath.Join(dir, rel)
		for _, r := range roots {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(r, rel), &st); err != nil {
				continue
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				break
			}
			if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
			return os.Chmod(p, os.FileMode(st.Mode&0o777)|modeBits(st.Mode))
		}
		return os.Chmod(p, 0o755)
	}
	if err := like("."); err != nil {
		return err
	}
	w := filepath.Join(dir, strings.TrimPrefix(dirInside, "/"))
	if err := os.MkdirAll(filepath.Join(w, "run"), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(w, 0o755); err != nil {
		return err
	}
	for i := 0; i < nLower; i++ {
		if err := os.MkdirAll(filepath.Join(w, "lower", strconv.Itoa(i)), 0o700); err != nil {
			return err
		}
	}
	// A hard link when the run directory allows (one inode for every
	// sandbox), else a copy.
	dst := filepath.Join(w, "warden-agent")
	if err := os.Link(agent, dst); err != nil {
		if err := copyFile(agent, dst, 0o555); err != nil {
			return err
		}
	}
	for _, t := range targets {
		if t == "/" {
			continue
		}
		rel := strings.TrimPrefix(t, "/")
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
			return err
		}
		for p := rel; p != "." && p != "/"; p = filepath.Dir(p) {
			if err := like(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// modeBits converts the setuid, setgid and sticky bits of a stat mode.
func modeBits(m uint32) os.FileMode {
	var f os.FileMode
	if m&unix.S_ISUID != 0 {
		f |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		f |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		f |= os.ModeSticky
	}
	return f
}
