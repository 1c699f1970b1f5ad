// Package diskimg gives each sandbox a writable layer on the host's disk with
// a hard size limit the host enforces: a sparse ext4 image file of exactly
// the sandbox's disk limit, attached to a loop device and mounted (nosuid,
// nodev) on the sandbox's stage directory. Filling it gives ENOSPC inside the
// sandbox, never an OOM: its pages are page cache that the kernel writes back
// and reclaims, not tmpfs pages pinned in the sandbox's memory cgroup, so the
// memory and disk limits are independent.
//
// Why an image per sandbox and not one shared filesystem with project
// quotas: quotas need CONFIG_QUOTA (ext4) or CONFIG_XFS_QUOTA, which common
// kernels (this project's CI kernel among them) are built without, while
// loop devices and ext4 are everywhere. An image also makes statfs inside the
// sandbox (df) report the sandbox's own limit and use, and its removal frees
// everything at once. The cost is small: each image is a sparse copy of one
// pre-formatted image per size (a few hundred KiB of metadata), attached with
// one LOOP_CONFIGURE ioctl; nothing is formatted on the create path.
package diskimg

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Pool makes, mounts and removes sandbox images under one directory.
type Pool struct {
	dir  string
	mkfs string

	mu sync.Mutex // serialises formatting the per-size templates
}

// New returns a pool keeping its images in dir (created 0700). It fails
// when this host cannot make or mount images (no mkfs.ext4, no loop
// devices, no ext4): the caller then falls back to memory.
func New(dir string) (*Pool, error) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				mkfs, err = p, nil
				break
			}
		}
		if err != nil {
			return nil, errors.New("mkfs.ext4 not found (install e2fsprogs)")
		}
	}
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices unavailable: %w", err)
	}
	unix.Close(fd)
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\text4\n") {
		return nil, errors.New("the kernel has no ext4")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk image dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk image dir: %w", err)
	}
	return &Pool{dir: dir, mkfs: mkfs}, nil
}

// Dir is where the images live.
func (p *Pool) Dir() string { return p.dir }

// Image is the path of sandbox id's image.
func (p *Pool) Image(id string) string { return filepath.Join(p.dir, id+".img") }

// Mount creates sandbox id's image of size bytes and mounts it on target
// (an existing empty directory), whose root then belongs to uid:uid with
// mode 0700. On failure nothing is left behind.
func (p *Pool) Mount(id string, size int64, target string, uid int) (err error) {
	if size < 16<<20 {
		size = 16 << 20 // ext4's practical minimum
	}
	tmpl, err := p.template(size)
	if err != nil {
		return err
	}
	img := p.Image(id)
	if err := sparseCopy(tmpl, img); err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(img)
		}
	}()
	if err := attachAndMount(img, target); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			Unmount(target)
		}
	}()
	if err := os.Chown(target, uid, uid); err != nil {
		return fmt.Errorf("disk image root: %w", err)
	}
	if err := os.Chmod(target, 0o700); err != nil {
		return fmt.Errorf("disk image root: %w", err)
	}
	// lost+found stays root's (0700): the sandbox never sees the stage's
	// root, only the overlay built inside it.
	return nil
}

// Remove unmounts target (if the image is mounted there) and deletes sandbox
// id's image. Idempotent.
func (p *Pool) Remove(id, target string) error {
	if err := Unmount(target); err != nil {
		return err
	}
	if err := os.Remove(p.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove disk image: %w", err)
	}
	return nil
}

// Images lists the sandbox ids that have an image.
func (p *Pool) Images() ([]string, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("read disk image dir: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".img") && !strings.HasPrefix(n, ".") {
			ids = append(ids, strings.TrimSuffix(n, ".img"))
		}
	}
	return ids, nil
}

// Mounted reports whether target is a mount point.
func Mounted(target string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(target, &st) != nil || unix.Lstat(filepath.Dir(target), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Unmount unmounts target if something is mounted there; a busy mount (a
// process of the sandbox still holding it) is detached lazily. The loop
// device goes away with the last reference (it is attached autoclear).
func Unmount(target string) error {
	if !Mounted(target) {
		return nil
	}
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// template returns a formatted image of size bytes, making it once.
func (p *Pool) template(size int64) (string, error) {
	path := filepath.Join(p.dir, ".ext4-"+strconv.FormatInt(size, 10)+".tmpl")
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("format disk image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("format disk image: %w", err)
	}
	// No journal (a sandbox's scratch layer does not outlive the host), no
	// reserved blocks (the whole limit is the sandbox's), one inode per
	// 8 KiB, inode tables initialised lazily (and never, see noinit_itable).
	cmd := exec.Command(p.mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal,^resize_inode",
		"-E", "nodiscard,lazy_itable_init=1", "-m", "0", "-b", "4096", "-i", "8192", "-L", "warden-disk", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("format disk image: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("format disk image: %w", err)
	}
	return path, nil
}

// sparseCopy copies src to a new file dst, holes included.
func sparseCopy(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	// A reflink where the filesystem has them (btrfs, XFS), else the data
	// extents one by one.
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	ifd := int(in.Fd())
	var off int64
	for off < st.Size() {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// attachAndMount attaches img to a free loop device (autoclear, direct I/O
// where the host filesystem allows it, so the image's pages are not cached
// twice) and mounts its ext4 on target.
func attachAndMount(img, target string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open disk image: %w", err)
	}
	defer f.Close()
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop control: %w", err)
	}
	defer unix.Close(ctl)
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lfd, err := openLoop(dev, n)
		if err != nil {
			return err
		}
		cfg := &unix.LoopConfig{Fd: uint32(f.Fd()), Size: 4096}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:], "warden:"+filepath.Base(img))
		err = unix.IoctlLoopConfigure(lfd, cfg)
		if errors.Is(err, unix.EINVAL) {
			// No direct I/O on this host filesystem: buffered.
			cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
			cfg.Size = 0
			err = unix.IoctlLoopConfigure(lfd, cfg)
		}
		if errors.Is(err, unix.EBUSY) && attempt < 20 {
			unix.Close(lfd) // another attach won the race for this device
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			unix.Close(lfd)
			return fmt.Errorf("attach %s: %w", dev, err)
		}
		// noinit_itable: ext4's lazy-init thread would otherwise zero every
		// inode table in the background, writing megabytes per sandbox.
		merr := unix.Mount(dev, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable")
		unix.Close(lfd) // the mount holds the device now; without one it detaches
		if merr != nil {
			return fmt.Errorf("mount disk image: %w", merr)
		}
		return nil
	}
}

// openLoop opens loop device n, creating its node when devtmpfs did not.
func openLoop(dev string, n int) (int, error) {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		if merr := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); merr != nil && !errors.Is(merr, unix.EEXIST) {
			return -1, fmt.Errorf("create %s: %w", dev, merr)
		}
		fd, err = unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dev, err)
	}
	return fd, nil
}
