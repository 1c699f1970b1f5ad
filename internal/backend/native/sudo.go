package native

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The sandbox's sudo program (internal/agent/sudo) is the agent binary,
// bind-mounted read-only at /usr/local/bin/sudo by the sandbox's init from a
// detached mount wardend clones for it (never a per-sandbox copy: that cost
// every sandbox the binary's size in its disk limit and a write of it on
// the create path).
//
// The clone's source is a small tmpfs, made once per backend and attached
// nowhere on the host, holding only the agent binary: a bind mount shows the
// path of its source inside that source's filesystem in the sandbox's
// /proc/self/mountinfo, and there it reads "/warden-agent", never a host
// path. Cloning a file of a detached mount needs Linux 6.15; on older
// kernels the clone is of the run directory's copy of the agent, whose path
// inside its host filesystem the sandbox's mountinfo then shows.
//
// The clone is not idmapped: the binary belongs to host root, which the
// sandbox's user namespace does not map, so not even a sandbox root that
// somehow remounted it writable could write the one file every sandbox
// shares.
const sudoFSName = "warden-agent"

// sudoMount returns a detached, read-only, nosuid, nodev mount of the agent
// binary for a sandbox's /usr/local/bin/sudo.
func (b *Backend) sudoMount() (int, error) {
	b.sudoOnce.Do(func() { b.sudoFS, b.sudoFSErr = newSudoFS(b.agent) })
	dirfd, path := unix.AT_FDCWD, b.agent
	if b.sudoFSErr == nil {
		dirfd, path = b.sudoFS, sudoFSName
	}
	fd, err := unix.OpenTree(dirfd, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone agent binary for sudo: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("read-only agent binary for sudo: %w", err)
	}
	return fd, nil
}

// newSudoFS returns a detached tmpfs holding only a copy of the agent
// binary (0555, host root's), after checking that a file of it can be
// cloned (Linux 6.15 and later).
func newSudoFS(agent string) (mfd int, err error) {
	in, err := os.Open(agent)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	defer unix.Close(fsfd)
	for k, v := range map[string]string{"source": sudoFSName, "mode": "0755", "nr_inodes": "4",
		"size": strconv.FormatInt(st.Size()+1<<20, 10)} {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return -1, fmt.Errorf("sudo binary fs: %s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	mfd, err = unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(mfd)
		}
	}()
	fd, err := unix.Openat(mfd, sudoFSName, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o500)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	out := os.NewFile(uintptr(fd), sudoFSName)
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(0o555)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	probe, err := unix.OpenTree(mfd, sudoFSName, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: clone a file of a detached mount (Linux 6.15+): %w", err)
	}
	unix.Close(probe)
	return mfd, nil
}
