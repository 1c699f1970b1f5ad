package native

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The sandbox's sudo program (internal/agent/sudo) is the agent binary,
// bind-mounted read-only at /usr/local/bin/sudo by the sandbox's init from a
// mount wardend clones for it (never a per-sandbox copy: that cost every
// sandbox the binary's size in its disk limit and a write of it on the
// create path).
//
// The clone's source is a small tmpfs, made once per backend, holding only
// the agent binary: a bind mount shows the path of its source inside that
// source's filesystem in the sandbox's /proc/self/mountinfo, and there it
// reads "/warden-agent", never a host path. Linux 6.15 and later clone a
// file of a detached mount, so the tmpfs is attached nowhere on the host.
// Older kernels clone only from the caller's mount namespace: there the
// tmpfs is attached at <run dir>/.sudo-fs (a name no sandbox id can take),
// reused by a later backend if it holds the same binary (a daemon that
// crashed), and unmounted by Close (the daemon's shutdown). A clone in a
// sandbox outlives both: unmounting the host's mount takes nothing from
// running sandboxes. If neither works the sandbox goes without sudo; it
// never gets a clone of a host path.
//
// The clone is not idmapped: the binary belongs to host root, which the
// sandbox's user namespace does not map, so not even a sandbox root that
// somehow remounted it writable could write the one file every sandbox
// shares.
const (
	sudoFSName = "warden-agent"
	sudoDir    = ".sudo-fs"
)

// sudoAttach, set by tests, attaches the sudo fs on the host even where a
// detached one could be cloned, to exercise older kernels' path.
var sudoAttach = false

// sudoSource is the source of sandboxes' sudo mounts.
type sudoSource struct {
	mu     sync.Mutex
	ready  bool   // open ran
	fd     int    // the fs's detached mount, or an O_PATH of the binary on the attached fs
	name   string // the binary's path from fd ("" when fd is the binary)
	at     string // where the fs is attached on the host; "" when it is not
	err    error  // why there is no source
	closed bool
}

// sudoMount returns a detached, read-only, nosuid, nodev, private mount of
// the agent binary for a sandbox's /usr/local/bin/sudo.
func (b *Backend) sudoMount() (int, error) {
	s := &b.sudo
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return -1, errors.New("clone agent binary for sudo: backend closed")
	}
	if !s.ready {
		s.ready = true
		s.open(b.agent, filepath.Join(b.cfg.RunDir, sudoDir))
	}
	if s.err != nil {
		return -1, fmt.Errorf("clone agent binary for sudo: %w", s.err)
	}
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if s.name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(s.fd, s.name, uint(flags))
	if err != nil {
		return -1, fmt.Errorf("clone agent binary for sudo: %w", err)
	}
	// Private: a clone of an attached, shared mount would be its peer.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("read-only agent binary for sudo: %w", err)
	}
	return fd, nil
}

// open makes the source: the detached fs where a file of it can be cloned,
// else the fs attached at at.
func (s *sudoSource) open(agent, at string) {
	s.fd = -1
	mfd, err := newSudoFS(agent)
	if err != nil {
		s.err = err
		return
	}
	if !sudoAttach {
		probe, perr := unix.OpenTree(mfd, sudoFSName, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if perr == nil {
			unix.Close(probe)
			s.fd, s.name = mfd, sudoFSName
			return
		}
	}
	// at is Close's to clean up even if attaching failed half-way.
	s.at = at
	s.fd, s.err = attachSudoFS(mfd, agent, at)
	unix.Close(mfd)
}

// Close implements io.Closer: it unmounts the sudo fs where it is attached
// on the host (kernels before 6.15). Sandboxes keep their clones; a sudo
// asked for after Close fails (the sandbox goes without).
func (b *Backend) Close() error {
	s := &b.sudo
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.fd >= 0 && s.ready {
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.at == "" {
		return nil
	}
	// Another backend on this run directory may have removed it already.
	if err := unmountAll(s.at); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unmount sudo binary fs: %w", err)
	}
	if err := os.Remove(s.at); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove sudo binary fs mount point: %w", err)
	}
	return nil
}

// attachSudoFS attaches the fs mfd at at (a directory it makes, 0700), or
// reuses the one there if it holds agent, and returns an O_PATH descriptor
// of the binary on it.
func attachSudoFS(mfd int, agent, at string) (int, error) {
	if err := os.Mkdir(at, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	mounted, err := isMountPoint(at)
	if err != nil {
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	if mounted {
		if fd, err := reuseSudoFS(agent, at); err == nil {
			return fd, nil
		}
		// Not ours, or an older binary: gone (sandboxes keep their clones).
		if err := unmountAll(at); err != nil {
			return -1, fmt.Errorf("sudo binary fs: replace %s: %w", at, err)
		}
	}
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return -1, fmt.Errorf("sudo binary fs: attach at %s: %w", at, err)
	}
	fd, err := unix.Open(filepath.Join(at, sudoFSName), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unmountAll(at)
		return -1, fmt.Errorf("sudo binary fs: %w", err)
	}
	return fd, nil
}

// reuseSudoFS returns an O_PATH descriptor of the binary on the fs at at if
// that is a read-only tmpfs whose warden-agent is host root's, 0555, and
// agent byte for byte.
func reuseSudoFS(agent, at string) (int, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(at, &sfs); err != nil {
		return -1, err
	}
	if sfs.Type != unix.TMPFS_MAGIC || sfs.Flags&unix.ST_RDONLY == 0 {
		return -1, errors.New("not a read-only tmpfs")
	}
	fd, err := unix.Open(filepath.Join(at, sudoFSName), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	f := os.NewFile(uintptr(fd), sudoFSName)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, err
	}
	if st.Mode != unix.S_IFREG|0o555 || st.Uid != 0 || st.Gid != 0 {
		return -1, errors.New("not the agent binary")
	}
	same, err := sameContent(f, st.Size, agent)
	if err != nil || !same {
		return -1, errors.New("not the agent binary")
	}
	return unix.Open(filepath.Join(at, sudoFSName), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// sameContent says whether f (of size bytes) holds what the file at path
// holds.
func sameContent(f *os.File, size int64, path string) (bool, error) {
	g, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer g.Close()
	if st, err := g.Stat(); err != nil || st.Size() != size {
		return false, err
	}
	x, y := make([]byte, 1<<16), make([]byte, 1<<16)
	for {
		n, errX := io.ReadFull(f, x)
		m, errY := io.ReadFull(g, y)
		if n != m || !bytes.Equal(x[:n], y[:m]) {
			return false, nil
		}
		if errX == io.EOF || errX == io.ErrUnexpectedEOF {
			return errY == errX, nil
		}
		if errX != nil {
			return false, errX
		}
		if errY != nil {
			return false, errY
		}
	}
}

// isMountPoint says whether something is mounted on the directory dir.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// unmountAll unmounts every mount stacked on dir.
func unmountAll(dir string) error {
	for range 16 {
		mounted, err := isMountPoint(dir)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
			if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("%s: still mounted after 16 unmounts", dir)
}

// newSudoFS returns a detached, read-only tmpfs holding only a copy of the
// agent binary (0555, host root's).
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
	for k, v := range map[string]string{"source": sudoFSName, "mode": "0700", "nr_inodes": "4",
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
	return mfd, nil
}

var _ io.Closer = (*Backend)(nil)
