package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// Volume snapshots: a point-in-time copy of a volume's image, kept as
// Dir/snapshots/<id>.img beside the volumes' images.
//
// Taking one holds the volume's lock (nothing mounts it, unmounts it,
// copies into it or resizes it meanwhile). A volume mounted on the host (a
// live sandbox, or a copy, has it) is frozen for the copy: FIFREEZE on its
// host mount flushes the filesystem to its image and blocks every writer,
// the sandbox's too, until FITHAW, which always follows (deferred: on
// error, on a cancelled context and on a panic; and Reconcile thaws every
// mounted volume at daemon start, in case a daemon died with one frozen).
// A volume nobody mounts needs no freeze. The image is copied with a
// reflink (FICLONE) where the host's filesystem can (btrfs, xfs), else
// sparsely: only the data extents (SEEK_DATA/SEEK_HOLE), holes kept.
//
// Restoring replaces the volume's image with a copy of the snapshot's,
// written beside it and renamed over it: a failure at any point leaves the
// volume as it was. It is refused while a live sandbox mounts the volume.
// The volume keeps its size: a snapshot taken before a resize is grown to
// it (e2fsck and resize2fs on the copy, before the rename).

// Errors of volume snapshots.
var (
	ErrSnapshotNotFound = errkind.Sentinel(errkind.NotFound, "volume snapshot not found", errkind.WithDetail)
	ErrSnapshotTaken    = errkind.Sentinel(errkind.Conflict, "a snapshot of that name exists", errkind.WithDetail)
)

// The ioctls that freeze and thaw a filesystem (linux/fs.h: _IOWR('X',
// 119, int) and _IOWR('X', 120, int)).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// MaxSnapshots is the most snapshots a volume keeps (each takes host disk
// outside the volume's quota).
const MaxSnapshots = 32

// copyFault, when set (tests), is called after each chunk a copy writes,
// with the bytes copied so far; an error it returns fails the copy.
var copyFault func(copied int64) error

func (m *Manager) snapDir() string            { return filepath.Join(m.cfg.Dir, "snapshots") }
func (m *Manager) snapImage(id string) string { return filepath.Join(m.snapDir(), id+".img") }

func (m *Manager) snaps() (store.VolumeSnapshotStore, error) {
	ss, ok := m.st.(store.VolumeSnapshotStore)
	if !ok {
		return nil, fmt.Errorf("%w: the store keeps no volume snapshots", ErrUnavailable)
	}
	return ss, nil
}

func newSnapshotID() string { return "vsn-" + strings.TrimPrefix(newID(), "vol-") }

// Snapshot takes a point-in-time copy of v named name (a generated name
// when ""), mounted by a sandbox or not.
func (m *Manager) Snapshot(ctx context.Context, v store.Volume, name string) (store.VolumeSnapshot, error) {
	ss, err := m.snaps()
	if err != nil {
		return store.VolumeSnapshot{}, err
	}
	now := time.Now().UTC()
	if name == "" {
		name = "snap-" + now.Format("20060102-150405.000")
	}
	if err := ValidName(name); err != nil {
		return store.VolumeSnapshot{}, err
	}
	if _, err := ss.GetVolumeSnapshot(ctx, v.ID, v.Owner, name); err == nil {
		return store.VolumeSnapshot{}, fmt.Errorf("%w: %s", ErrSnapshotTaken, name)
	}
	if list, err := ss.ListVolumeSnapshots(ctx, v.ID); err != nil {
		return store.VolumeSnapshot{}, err
	} else if len(list) >= MaxSnapshots {
		return store.VolumeSnapshot{}, fmt.Errorf("%w: volume %s has %d snapshots, the most it may keep: delete one first", ErrInvalid, v.Name, len(list))
	}
	if err := os.MkdirAll(m.snapDir(), 0o700); err != nil {
		return store.VolumeSnapshot{}, fmt.Errorf("volume snapshot dir: %w", err)
	}
	sn := store.VolumeSnapshot{ID: newSnapshotID(), VolumeID: v.ID, Owner: v.Owner, Name: name, CreatedAt: now}
	dst := m.snapImage(sn.ID)
	s := m.vs(v.ID)
	sn.SizeBytes, sn.StoredBytes, err = func() (int64, int64, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return m.copyFrozen(ctx, v.ID, dst)
	}()
	if err != nil {
		return store.VolumeSnapshot{}, fmt.Errorf("snapshot volume %s: %w", v.Name, err)
	}
	if err := ss.CreateVolumeSnapshot(ctx, sn); err != nil {
		os.Remove(dst)
		if errors.Is(err, store.ErrConflict) {
			return store.VolumeSnapshot{}, fmt.Errorf("%w: %s", ErrSnapshotTaken, name)
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.VolumeSnapshot{}, fmt.Errorf("%w: %s", ErrNotFound, v.Name)
		}
		return store.VolumeSnapshot{}, err
	}
	return sn, nil
}

// copyFrozen copies volume id's image to dst (which must not exist),
// freezing its host mount for the copy when it has one; the caller holds
// its lock. It returns the image's size and what the copy occupies.
func (m *Manager) copyFrozen(ctx context.Context, id, dst string) (size, stored int64, err error) {
	if m.mountedOnHost(id) {
		thaw, err := freeze(m.mountDir(id))
		if err != nil {
			return 0, 0, err
		}
		defer func() {
			if terr := thaw(); terr != nil {
				m.log.Error("thaw volume", "volume", id, "err", terr)
				err = errors.Join(err, terr)
			}
		}()
	}
	return copyImage(ctx, m.image(id), dst)
}

// freeze freezes the filesystem mounted at dir and returns the function
// that thaws it.
func freeze(dir string) (func() error, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", dir, err)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlFIFREEZE, 0); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("freeze %s: %w", dir, e)
	}
	return func() error {
		defer unix.Close(fd)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlFITHAW, 0); e != 0 {
			return fmt.Errorf("thaw %s: %w", dir, e)
		}
		return nil
	}, nil
}

// thawIfFrozen thaws the filesystem mounted at dir if it is frozen (a
// daemon that died during a snapshot left it so).
func thawIfFrozen(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("thaw %s: %w", dir, err)
	}
	defer unix.Close(fd)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlFITHAW, 0)
	if e != 0 && e != unix.EINVAL { // EINVAL: not frozen
		return fmt.Errorf("thaw %s: %w", dir, e)
	}
	return nil
}

// copyImage copies image src to dst (created; it must not exist) with a
// reflink when the filesystem can, else sparsely, and syncs it. On failure
// dst is removed. It returns src's size and the blocks dst occupies.
func copyImage(ctx context.Context, src, dst string) (size, stored int64, err error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, 0, fmt.Errorf("open image: %w", err)
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return 0, 0, fmt.Errorf("stat image: %w", err)
	}
	size = st.Size
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("create image copy: %w", err)
	}
	done := false
	defer func() { // also on a panic: no half-written copy stays
		if out != nil {
			out.Close()
		}
		if !done {
			os.Remove(dst)
		}
	}()
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		if err := sparseCopy(ctx, in, out, size); err != nil {
			return 0, 0, err
		}
	} else if copyFault != nil {
		if err := copyFault(size); err != nil {
			return 0, 0, err
		}
	}
	if err := out.Sync(); err != nil {
		return 0, 0, fmt.Errorf("sync image copy: %w", err)
	}
	var ost unix.Stat_t
	if err := unix.Fstat(int(out.Fd()), &ost); err != nil {
		return 0, 0, fmt.Errorf("stat image copy: %w", err)
	}
	err = out.Close()
	out = nil
	if err != nil {
		return 0, 0, fmt.Errorf("close image copy: %w", err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return 0, 0, err
	}
	done = true
	return size, ost.Blocks * 512, nil
}

// sparseCopy copies in's data extents to out (empty) at the same offsets
// and gives out in's size: holes stay holes.
func sparseCopy(ctx context.Context, in, out *os.File, size int64) error {
	const chunk = 8 << 20
	ifd, ofd := int(in.Fd()), int(out.Fd())
	var copied int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole up to the end
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for data < hole {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(hole-data, chunk)
			roff, woff := data, data
			w, err := unix.CopyFileRange(ifd, &roff, ofd, &woff, int(n), 0)
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				w, err = preadWrite(ifd, ofd, data, int(n))
			}
			if err != nil {
				return fmt.Errorf("copy image: %w", err)
			}
			if w == 0 {
				return fmt.Errorf("copy image: %w", unix.EIO) // the source shrank under us
			}
			data += int64(w)
			copied += int64(w)
			if copyFault != nil {
				if err := copyFault(copied); err != nil {
					return err
				}
			}
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("size image copy: %w", err)
	}
	return nil
}

func preadWrite(ifd, ofd int, off int64, n int) (int, error) {
	buf := make([]byte, min(n, 1<<20))
	r, err := unix.Pread(ifd, buf, off)
	if err != nil || r == 0 {
		return 0, err
	}
	return unix.Pwrite(ofd, buf[:r], off)
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Snapshots lists v's snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, v store.Volume) ([]store.VolumeSnapshot, error) {
	ss, err := m.snaps()
	if err != nil {
		return nil, err
	}
	return ss.ListVolumeSnapshots(ctx, v.ID)
}

// GetSnapshot returns v's snapshot name.
func (m *Manager) GetSnapshot(ctx context.Context, v store.Volume, name string) (store.VolumeSnapshot, error) {
	ss, err := m.snaps()
	if err != nil {
		return store.VolumeSnapshot{}, err
	}
	sn, err := ss.GetVolumeSnapshot(ctx, v.ID, v.Owner, name)
	if errors.Is(err, store.ErrNotFound) {
		return sn, fmt.Errorf("%w: %s of volume %s", ErrSnapshotNotFound, name, v.Name)
	}
	return sn, err
}

// DeleteSnapshot removes snapshot sn: its record, then its image.
func (m *Manager) DeleteSnapshot(ctx context.Context, sn store.VolumeSnapshot) error {
	ss, err := m.snaps()
	if err != nil {
		return err
	}
	s := m.vs(sn.VolumeID)
	s.mu.Lock() // not while a restore or a create from it reads it
	defer s.mu.Unlock()
	if err := ss.DeleteVolumeSnapshot(ctx, sn.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrSnapshotNotFound, sn.Name)
		}
		return err
	}
	if err := os.Remove(m.snapImage(sn.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove volume snapshot image: %w", err)
	}
	return nil
}

// Restore replaces v's files with snapshot sn's (one of v's): refused
// (ErrInUse) while a live sandbox mounts v or an operation uses it. The
// volume keeps its size.
func (m *Manager) Restore(ctx context.Context, v store.Volume, sn store.VolumeSnapshot) error {
	if sn.VolumeID != v.ID {
		return fmt.Errorf("%w: snapshot %s is not one of volume %s", ErrSnapshotNotFound, sn.Name, v.Name)
	}
	s := m.vs(v.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops > 0 {
		return fmt.Errorf("%w: %s: a copy or resize is in progress", ErrInUse, v.Name)
	}
	atts, err := m.st.VolumeAttachments(ctx, v.ID)
	if err != nil {
		return err
	}
	if len(atts) > 0 {
		return fmt.Errorf("%w: %s is mounted by sandbox %s: end it to restore", ErrInUse, v.Name, atts[0].SandboxID)
	}
	if err := m.unmount(v.ID); err != nil {
		return err
	}
	img := m.image(v.ID)
	tmp := img + ".restore"
	os.Remove(tmp)
	if err := m.imageFrom(ctx, sn, tmp, v.SizeBytes); err != nil {
		return fmt.Errorf("restore volume %s: %w", v.Name, err)
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore volume %s: %w", v.Name, err)
	}
	return syncDir(m.imageDir())
}

// imageFrom writes snapshot sn's image to dst, grown to size when that is
// larger; on failure dst is removed.
func (m *Manager) imageFrom(ctx context.Context, sn store.VolumeSnapshot, dst string, size int64) error {
	if _, _, err := copyImage(ctx, m.snapImage(sn.ID), dst); err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.Remove(dst)
		}
	}()
	if err := m.growImage(ctx, dst, sn.SizeBytes, size); err != nil {
		return err
	}
	done = true
	return nil
}

// growImage grows image img, of an ext4 filesystem of from bytes, to size
// bytes (nothing when that is no larger), offline, and syncs it.
func (m *Manager) growImage(ctx context.Context, img string, from, size int64) error {
	if size <= from {
		return nil
	}
	if err := os.Truncate(img, size); err != nil {
		return fmt.Errorf("grow image: %w", err)
	}
	out, err := exec.CommandContext(ctx, m.e2fsck, "-f", "-y", img).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return fmt.Errorf("e2fsck: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, m.resize2fs, img).CombinedOutput(); err != nil {
		return fmt.Errorf("resize2fs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sync image: %w", err)
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fmt.Errorf("sync image: %w", err)
	}
	return nil
}

// CreateFrom makes owner's volume name holding the files of snapshot sn
// (of one of owner's volumes), of the snapshot's size.
func (m *Manager) CreateFrom(ctx context.Context, owner, name string, sn store.VolumeSnapshot) (store.Volume, error) {
	if err := ValidName(name); err != nil {
		return store.Volume{}, err
	}
	if sn.Owner != owner {
		return store.Volume{}, fmt.Errorf("%w: %s", ErrSnapshotNotFound, sn.Name)
	}
	if _, err := m.st.GetVolumeByName(ctx, owner, name); err == nil {
		return store.Volume{}, fmt.Errorf("%w: %s", ErrNameTaken, name)
	}
	v := store.Volume{ID: newID(), Name: name, Owner: owner, SizeBytes: sn.SizeBytes, CreatedAt: time.Now().UTC()}
	img := m.image(v.ID)
	tmp := img + ".new"
	s := m.vs(sn.VolumeID)
	err := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return m.imageFrom(ctx, sn, tmp, 0)
	}()
	if err != nil {
		return store.Volume{}, fmt.Errorf("create volume %s from a snapshot: %w", name, err)
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return store.Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := m.st.CreateVolume(ctx, v); err != nil {
		os.Remove(img)
		if errors.Is(err, store.ErrConflict) {
			return store.Volume{}, fmt.Errorf("%w: %s", ErrNameTaken, name)
		}
		return store.Volume{}, fmt.Errorf("create volume: %w", err)
	}
	return v, nil
}

// removeSnapshotImages removes the images of snapshots (their volume's
// record, and with it theirs, is gone).
func (m *Manager) removeSnapshotImages(snaps []store.VolumeSnapshot) error {
	var errs []error
	for _, sn := range snaps {
		if err := os.Remove(m.snapImage(sn.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove volume snapshot image: %w", err))
		}
	}
	return errors.Join(errs...)
}

// cleanSnapshots, at daemon start, removes what a daemon that died during
// a copy left: temporary images, and snapshot images without a record.
func (m *Manager) cleanSnapshots(ctx context.Context, vols []store.Volume) error {
	ss, err := m.snaps()
	if err != nil {
		return nil
	}
	for _, p := range []string{filepath.Join(m.imageDir(), "*.restore"), filepath.Join(m.imageDir(), "*.new")} {
		tmps, _ := filepath.Glob(p)
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	known := map[string]bool{}
	for _, v := range vols {
		list, err := ss.ListVolumeSnapshots(ctx, v.ID)
		if err != nil {
			return err
		}
		for _, sn := range list {
			known[sn.ID+".img"] = true
		}
	}
	ents, err := os.ReadDir(m.snapDir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("volume snapshots: %w", err)
	}
	for _, e := range ents {
		if !known[e.Name()] {
			os.Remove(filepath.Join(m.snapDir(), e.Name()))
		}
	}
	return nil
}
