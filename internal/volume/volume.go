// Package volume keeps persistent volumes: named directories with a size
// quota, owned by a principal, that outlive the sandboxes mounting them and
// the daemon.
//
// Each volume is an ext4 image file (Dir/images/<id>.img, sparse, of the
// volume's size) that the host attaches to a loop device and mounts at
// Dir/mnt/<id> (nosuid, nodev, noatime) while something uses it: a live
// sandbox that mounts it, or a copy, inspect or resize in progress. The
// quota is the filesystem's size, enforced by the host's kernel: a writer
// in a sandbox gets ENOSPC, and nothing outside the image fills up. Growing
// a volume grows its image and then its filesystem (resize2fs, online when
// mounted).
//
// A sandbox sees the volume through a bind of the host mount (backend
// Spec.Volumes; nosuid, nodev, read-only if asked, idmapped through the
// sandbox's user namespace on the native backend so files keep the ids the
// sandbox sees). The store records attachments and enforces who may mount
// what: read-write by one live sandbox, or read-only by any number.
//
// Copying files in and out without a sandbox resolves paths beneath the
// volume's root with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV): a symlink a sandbox planted in
// the volume is never followed, on the host, out of it.
//
// Snapshots (snapshot.go) are point-in-time copies of a volume's image:
// taken under FIFREEZE when it is mounted, restored by a copy renamed over
// the image.
package volume

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
	"github.com/warden-sandbox/warden/internal/store"
)

// Errors, with their kinds (the APIs map them to status codes).
var (
	ErrNotFound     = errkind.New(errkind.NotFound, "volume not found")
	ErrInUse        = errkind.New(errkind.Conflict, "volume is in use")
	ErrNameTaken    = errkind.New(errkind.Conflict, "a volume of that name exists")
	ErrInvalid      = errkind.Sentinel(errkind.Invalid, "invalid volume request", errkind.WithDetail)
	ErrBadPath      = errkind.Sentinel(errkind.Invalid, "bad path in volume", errkind.WithDetail)
	ErrNotFoundPath = errkind.Sentinel(errkind.NotFound, "no such file in the volume", errkind.WithDetail)
	ErrUnavailable  = errkind.Sentinel(errkind.Unavailable, "volumes are unavailable on this daemon", errkind.WithDetail)
	ErrFull         = errkind.New(errkind.TooLarge, "the volume is full: resize it or free space in it")
)

// Limits of a volume's size.
const (
	MinSize     = 16 << 20
	DefaultSize = 1 << 30
	MaxSize     = 1 << 40
)

// Config configures a Manager.
type Config struct {
	// Dir holds the images (Dir/images) and their host mount points
	// (Dir/mnt); created 0700.
	Dir string
	// UID and GID own a new volume's root directory and files copied in
	// (as the sandbox sees them: the template's default user).
	UID, GID int
	Log      *slog.Logger
}

// Request asks for a volume to be mounted into a new sandbox.
type Request struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Info is a volume with what the host observes of it.
type Info struct {
	store.Volume
	UsedBytes   int64                    `json:"used_bytes"`
	Attachments []store.VolumeAttachment `json:"attachments"`
}

// Manager keeps volumes.
type Manager struct {
	cfg       Config
	st        store.VolumeStore
	log       *slog.Logger
	mkfs      string
	resize2fs string
	e2fsck    string

	mu    sync.Mutex
	state map[string]*vstate // by volume id
}

// vstate is a volume's in-memory state: its lock and the operations
// holding its host mount.
type vstate struct {
	mu  sync.Mutex
	ops int
}

// New returns a manager, or an error wrapping ErrUnavailable when this
// host cannot make volumes (no mkfs.ext4 or resize2fs, no loop devices, no
// ext4).
func New(cfg Config, st store.VolumeStore) (*Manager, error) {
	m := &Manager{cfg: cfg, st: st, log: cfg.Log, state: map[string]*vstate{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	var err error
	if m.mkfs, err = tool("mkfs.ext4"); err != nil {
		return nil, err
	}
	if m.resize2fs, err = tool("resize2fs"); err != nil {
		return nil, err
	}
	if m.e2fsck, err = tool("e2fsck"); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: loop devices: %w", ErrUnavailable, err)
	}
	unix.Close(fd)
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\text4\n") {
		return nil, fmt.Errorf("%w: the kernel has no ext4", ErrUnavailable)
	}
	for _, d := range []string{cfg.Dir, m.imageDir(), m.mntDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("volume dir: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("volume dir: %w", err)
		}
	}
	return m, nil
}

func tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin/", "/sbin/"} {
		if _, err := os.Stat(d + name); err == nil {
			return d + name, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found (install e2fsprogs)", ErrUnavailable, name)
}

func (m *Manager) imageDir() string          { return filepath.Join(m.cfg.Dir, "images") }
func (m *Manager) mntDir() string            { return filepath.Join(m.cfg.Dir, "mnt") }
func (m *Manager) image(id string) string    { return filepath.Join(m.imageDir(), id+".img") }
func (m *Manager) mountDir(id string) string { return filepath.Join(m.mntDir(), id) }

func (m *Manager) vs(id string) *vstate {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state[id]
	if s == nil {
		s = &vstate{}
		m.state[id] = s
	}
	return s
}

// ValidName checks a volume name: 1 to 63 of a-z, 0-9, '-', '_', '.',
// starting with a letter or digit.
func ValidName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("%w: name must be 1 to 63 bytes", ErrInvalid)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("%w: name %q may hold only a-z, 0-9, '-', '_' and '.', and start with a letter or digit", ErrInvalid, name)
		}
	}
	return nil
}

func checkSize(size int64) error {
	if size < MinSize || size > MaxSize {
		return fmt.Errorf("%w: size must be between %d MiB and %d GiB", ErrInvalid, MinSize>>20, MaxSize>>30)
	}
	return nil
}

func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "vol-" + string(b)
}

// Create makes owner's volume name of size bytes (DefaultSize if 0).
func (m *Manager) Create(ctx context.Context, owner, name string, size int64) (store.Volume, error) {
	if size == 0 {
		size = DefaultSize
	}
	if err := ValidName(name); err != nil {
		return store.Volume{}, err
	}
	if err := checkSize(size); err != nil {
		return store.Volume{}, err
	}
	if _, err := m.st.GetVolumeByName(ctx, owner, name); err == nil {
		return store.Volume{}, fmt.Errorf("%w: %s", ErrNameTaken, name)
	}
	v := store.Volume{ID: newID(), Name: name, Owner: owner, SizeBytes: size, CreatedAt: time.Now().UTC()}
	if err := m.format(v); err != nil {
		return store.Volume{}, err
	}
	if err := m.st.CreateVolume(ctx, v); err != nil {
		os.Remove(m.image(v.ID))
		if errors.Is(err, store.ErrConflict) {
			return store.Volume{}, fmt.Errorf("%w: %s", ErrNameTaken, name)
		}
		return store.Volume{}, fmt.Errorf("create volume: %w", err)
	}
	return v, nil
}

// format makes v's image: a sparse file of its size holding an ext4
// filesystem (journalled: volumes hold data meant to last) whose root
// belongs to the sandbox user.
func (m *Manager) format(v store.Volume) error {
	img := m.image(v.ID)
	tmp := img + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create volume image: %w", err)
	}
	err = f.Truncate(v.SizeBytes)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("create volume image: %w", err)
	}
	cmd := exec.Command(m.mkfs, "-q", "-F", "-t", "ext4", "-m", "0", "-b", "4096",
		"-E", "nodiscard,lazy_itable_init=1,root_owner="+strconv.Itoa(m.cfg.UID)+":"+strconv.Itoa(m.cfg.GID),
		"-L", "warden-vol", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("format volume image: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("create volume image: %w", err)
	}
	return nil
}

// Get returns owner's volume name ("" owner: any owner's, by name is
// then ambiguous, so the caller passes an owner).
func (m *Manager) Get(ctx context.Context, owner, name string) (store.Volume, error) {
	v, err := m.st.GetVolumeByName(ctx, owner, name)
	if errors.Is(err, store.ErrNotFound) {
		return v, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return v, err
}

// List returns owner's volumes ("" for everyone's).
func (m *Manager) List(ctx context.Context, owner string) ([]store.Volume, error) {
	return m.st.ListVolumes(ctx, owner)
}

// Inspect returns v with its usage and live attachments.
func (m *Manager) Inspect(ctx context.Context, v store.Volume) (Info, error) {
	info := Info{Volume: v, Attachments: []store.VolumeAttachment{}}
	atts, err := m.st.VolumeAttachments(ctx, v.ID)
	if err != nil {
		return info, err
	}
	if atts != nil {
		info.Attachments = atts
	}
	err = m.use(ctx, v.ID, func(dir string) error {
		var sf unix.Statfs_t
		if err := unix.Statfs(dir, &sf); err != nil {
			return fmt.Errorf("volume usage: %w", err)
		}
		info.UsedBytes = int64(sf.Blocks-sf.Bfree) * sf.Bsize
		return nil
	})
	return info, err
}

// Resize grows v to size bytes, mounted or not. Shrinking is refused.
func (m *Manager) Resize(ctx context.Context, v store.Volume, size int64) (store.Volume, error) {
	if err := checkSize(size); err != nil {
		return v, err
	}
	if size < v.SizeBytes {
		return v, fmt.Errorf("%w: volumes only grow (%d MiB now, %d MiB asked)", ErrInvalid, v.SizeBytes>>20, size>>20)
	}
	if size == v.SizeBytes {
		return v, nil
	}
	err := m.grow(ctx, v.ID, size)
	if err != nil {
		return v, fmt.Errorf("resize volume %s: %w", v.Name, err)
	}
	if err := m.st.SetVolumeSize(ctx, v.ID, size); err != nil {
		return v, err
	}
	v.SizeBytes = size
	return v, nil
}

// grow grows volume id's image and filesystem to size: offline when
// nothing has it mounted (e2fsck, then resize2fs on the image), online
// (resize2fs on the loop device, which needs CAP_SYS_RESOURCE) while a
// sandbox does.
func (m *Manager) grow(ctx context.Context, id string, size int64) error {
	s := m.vs(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	atts, err := m.st.VolumeAttachments(ctx, id)
	if err != nil {
		return err
	}
	img := m.image(id)
	if len(atts) == 0 && s.ops == 0 {
		if err := m.unmount(id); err != nil {
			return err
		}
		if err := os.Truncate(img, size); err != nil {
			return fmt.Errorf("grow volume image: %w", err)
		}
		// e2fsck exits 1 when it fixed something: still fine to resize.
		out, err := exec.CommandContext(ctx, m.e2fsck, "-f", "-y", img).CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			return fmt.Errorf("e2fsck: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if out, err := exec.CommandContext(ctx, m.resize2fs, img).CombinedOutput(); err != nil {
			return fmt.Errorf("resize2fs: %w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := m.mount(id); err != nil {
		return err
	}
	dev, err := loopOf(img)
	if err != nil {
		return err
	}
	if err := os.Truncate(img, size); err != nil {
		return fmt.Errorf("grow volume image: %w", err)
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	err = unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("grow %s: %w", dev, err)
	}
	if out, err := exec.CommandContext(ctx, m.resize2fs, dev).CombinedOutput(); err != nil {
		// The image is larger, the filesystem not yet: the next offline
		// resize (or this one again) finishes the job.
		return fmt.Errorf("%w: online resize of a mounted volume failed (unmount it: end the sandboxes that mount it, then resize): %s", ErrInUse, strings.TrimSpace(string(out)))
	}
	return nil
}

// loopOf finds the loop device backed by img.
func loopOf(img string) (string, error) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f))), nil
		}
	}
	return "", fmt.Errorf("no loop device backs %s", img)
}

// Delete removes v: refused (ErrInUse) while a live sandbox mounts it or
// an operation uses it.
func (m *Manager) Delete(ctx context.Context, v store.Volume) error {
	s := m.vs(v.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops > 0 {
		return fmt.Errorf("%w: %s: a copy or resize is in progress", ErrInUse, v.Name)
	}
	// Its snapshots go with it (the store cascades their records).
	var snaps []store.VolumeSnapshot
	if ss, err := m.snaps(); err == nil {
		if snaps, err = ss.ListVolumeSnapshots(ctx, v.ID); err != nil {
			return err
		}
	}
	if err := m.st.DeleteVolume(ctx, v.ID); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: %s is mounted by a sandbox", ErrInUse, v.Name)
		}
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, v.Name)
		}
		return err
	}
	if err := m.unmount(v.ID); err != nil {
		m.log.Error("volume deleted but its mount stays", "volume", v.ID, "err", err)
		return err
	}
	if err := os.Remove(m.image(v.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove volume image: %w", err)
	}
	if err := m.removeSnapshotImages(snaps); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.state, v.ID)
	m.mu.Unlock()
	return nil
}

// Attach records owner's volumes reqs as mounted by sandbox sandboxID
// (whose record exists), mounts them on the host and returns the mounts
// for the backend spec. On failure nothing is recorded or left mounted.
func (m *Manager) Attach(ctx context.Context, owner, sandboxID string, reqs []Request) ([]backend.VolumeMount, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	var atts []store.VolumeAttachment
	var mounts []backend.VolumeMount
	seen := map[string]bool{}
	now := time.Now().UTC()
	for _, r := range reqs {
		if err := backend.ValidVolumeTarget(r.Path); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		v, err := m.Get(ctx, owner, r.Name)
		if err != nil {
			return nil, err
		}
		if seen[v.ID] {
			return nil, fmt.Errorf("%w: volume %s is asked for twice", ErrInvalid, r.Name)
		}
		seen[v.ID] = true
		atts = append(atts, store.VolumeAttachment{VolumeID: v.ID, SandboxID: sandboxID, Path: r.Path, ReadOnly: r.ReadOnly, CreatedAt: now})
		mounts = append(mounts, backend.VolumeMount{Source: m.mountDir(v.ID), Target: r.Path, ReadOnly: r.ReadOnly})
	}
	if err := m.st.AttachVolumes(ctx, atts); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("%w: %w", ErrInUse, err)
		}
		return nil, err
	}
	for _, at := range atts {
		s := m.vs(at.VolumeID)
		s.mu.Lock()
		err := m.mount(at.VolumeID)
		s.mu.Unlock()
		if err != nil {
			m.Detach(context.WithoutCancel(ctx), sandboxID)
			return nil, err
		}
	}
	return mounts, nil
}

// Detach forgets sandboxID's attachments (its sandbox has ended) and
// unmounts, on the host, each volume nothing uses any more.
func (m *Manager) Detach(ctx context.Context, sandboxID string) {
	ids, err := m.attachedTo(ctx, sandboxID)
	if err != nil {
		m.log.Error("detach volumes", "sandbox", sandboxID, "err", err)
	}
	if err := m.st.DetachVolumes(ctx, sandboxID); err != nil {
		m.log.Error("detach volumes", "sandbox", sandboxID, "err", err)
		return
	}
	for _, id := range ids {
		m.release(ctx, id)
	}
}

// attachedTo lists the volumes sandboxID may have held: every volume
// mounted on the host (its record is terminal by now, so the store no
// longer tells; release keeps the ones others still use).
func (m *Manager) attachedTo(ctx context.Context, _ string) ([]string, error) {
	vols, err := m.st.ListVolumes(ctx, "")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vols {
		if m.mountedOnHost(v.ID) {
			ids = append(ids, v.ID)
		}
	}
	return ids, nil
}

// release unmounts volume id on the host if no live sandbox mounts it and
// no operation uses it.
func (m *Manager) release(ctx context.Context, id string) {
	s := m.vs(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops > 0 {
		return
	}
	atts, err := m.st.VolumeAttachments(ctx, id)
	if err != nil || len(atts) > 0 {
		return
	}
	if err := m.unmount(id); err != nil {
		m.log.Error("unmount volume", "volume", id, "err", err)
	}
}

// Reconcile, at daemon start, mounts every volume a live sandbox mounts
// (a host reboot unmounted it) and unmounts every other one (a daemon
// that died during a copy left it).
func (m *Manager) Reconcile(ctx context.Context) error {
	vols, err := m.st.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		atts, err := m.st.VolumeAttachments(ctx, v.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s := m.vs(v.ID)
		s.mu.Lock()
		if m.mountedOnHost(v.ID) {
			if err := thawIfFrozen(m.mountDir(v.ID)); err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", v.ID, err))
			}
		}
		if len(atts) > 0 {
			err = m.mount(v.ID)
		} else {
			err = m.unmount(v.ID)
		}
		s.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.ID, err))
		}
	}
	if err := m.cleanSnapshots(ctx, vols); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// use runs fn with volume id mounted on the host at the directory it gets,
// unmounting it afterwards if nothing else uses it.
func (m *Manager) use(ctx context.Context, id string, fn func(dir string) error) error {
	s := m.vs(id)
	s.mu.Lock()
	if err := m.mount(id); err != nil {
		s.mu.Unlock()
		return err
	}
	s.ops++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.ops--
		s.mu.Unlock()
		m.release(context.WithoutCancel(ctx), id)
	}()
	return fn(m.mountDir(id))
}

func (m *Manager) mountedOnHost(id string) bool { return diskimg.Mounted(m.mountDir(id)) }

// mount mounts volume id's image on its host directory unless it is; the
// caller holds its lock.
func (m *Manager) mount(id string) error {
	dir := m.mountDir(id)
	if diskimg.Mounted(dir) {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("volume mount point: %w", err)
	}
	if err := diskimg.MountImage(m.image(id), dir); err != nil {
		return fmt.Errorf("mount volume %s: %w", id, err)
	}
	return nil
}

// unmount unmounts volume id from the host and removes its mount point;
// the caller holds its lock.
func (m *Manager) unmount(id string) error {
	dir := m.mountDir(id)
	if err := diskimg.Unmount(dir); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove volume mount point: %w", err)
	}
	return nil
}

// Upload writes r to the file at path inside v (parents made as needed),
// atomically: a failed or short copy leaves no file. The file belongs to
// the sandbox user, mode 0644 (or mode if non-zero).
func (m *Manager) Upload(ctx context.Context, v store.Volume, path string, r io.Reader, mode os.FileMode) (int64, error) {
	var n int64
	err := m.use(ctx, v.ID, func(dir string) error {
		var err error
		n, err = writeBeneath(dir, path, r, mode, m.cfg.UID, m.cfg.GID)
		return err
	})
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return n, fmt.Errorf("%w: %w", ErrFull, err)
	}
	return n, err
}

// Download opens the regular file at path inside v and calls fn with it.
func (m *Manager) Download(ctx context.Context, v store.Volume, path string, fn func(f *os.File, size int64) error) error {
	return m.use(ctx, v.ID, func(dir string) error {
		f, err := openBeneath(dir, path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrBadPath, path)
		}
		return fn(f, st.Size())
	})
}
