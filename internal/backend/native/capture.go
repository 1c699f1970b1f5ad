package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// Filesystem snapshots (backend.FSCapturer). A sandbox with a disk image
// keeps its overlay's upper directories on it, mounted on Dir/stage in
// wardend's mount namespace (nsinit's buildRoot: u<i> for the i-th target,
// "/" first). CaptureFS copies each into a directory the caller gives, in
// the form template layers take: ids shifted from the sandbox's host range
// back to the ids the sandbox sees, whiteouts and opaque markers kept. A
// sandbox whose writable layer is a tmpfs (no disk images) cannot: the
// tmpfs lives only in the sandbox's own mount namespace.

var _ backend.FSCapturer = (*Backend)(nil)

// CaptureFS implements backend.FSCapturer.
func (b *Backend) CaptureFS(ctx context.Context, h backend.Handle, dir func(target string) (string, error)) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	if !bx.state.Disk {
		return fmt.Errorf("%w: sandbox %s keeps its writable layer in memory (no disk images: disk_dir), which the host cannot copy", backend.ErrUnsupported, bx.id)
	}
	spec, err := b.specOf(bx)
	if err != nil {
		return err
	}
	if len(spec.Uppers) > 0 {
		return fmt.Errorf("%w: sandbox %s captures its writable layer (a template build)", backend.ErrUnsupported, bx.id)
	}
	stage := filepath.Join(bx.state.Dir, "stage")
	for i, t := range upperTargets(spec.Layers) {
		if err := ctx.Err(); err != nil {
			return err
		}
		src := filepath.Join(stage, "u"+strconv.Itoa(i))
		names, err := readDirNames(src)
		if errors.Is(err, unix.ENOENT) || (err == nil && len(names) == 0) {
			continue // nothing written under this target
		}
		if err != nil {
			return fmt.Errorf("capture %s: %w", t, err)
		}
		dst, err := dir(t)
		if err != nil {
			return err
		}
		c := idCopier{base: bx.state.UIDBase, size: bx.state.UIDRange, links: map[uint64]string{}}
		if err := c.tree(ctx, src, dst, true); err != nil {
			return fmt.Errorf("capture %s: %w", t, err)
		}
	}
	return nil
}

// upperTargets returns the layer targets in the order nsinit numbers their
// upper directories: "/" first, then the others as they first appear.
func upperTargets(layers []backend.Layer) []string {
	out := []string{"/"}
	seen := map[string]bool{"/": true}
	for _, l := range layers {
		t := filepath.Clean(l.Target)
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

func readDirNames(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	return f.Readdirnames(-1)
}

// idCopier copies a writable layer written by a sandbox (host ids base ..
// base+size-1) to a layer tree with the ids the sandbox sees. Files
// hard-linked to each other stay so (links: inode -> first copy).
type idCopier struct {
	base, size uint32
	links      map[uint64]string
}

// nobody is what an id outside the sandbox's range becomes.
const nobody = 65534

func (c *idCopier) id(host uint32) int {
	if host >= c.base && host-c.base < c.size {
		return int(host - c.base)
	}
	return nobody
}

// overlayPrivate are overlay xattrs that describe the upper's own file
// system (file handles, link counts), meaningless in a copy.
var overlayPrivate = map[string]bool{
	"user.overlay.origin": true, "user.overlay.impure": true, "user.overlay.nlink": true,
	"user.overlay.upper": true, "user.overlay.uuid": true, "user.overlay.metacopy": true,
}

// tree copies directory src to dst (which exists when root is set). The
// sandbox is paused or stopped while it runs, so nothing under src moves;
// still, no symlink is followed: directories and files are opened with
// O_NOFOLLOW after an lstat said what they are.
func (c *idCopier) tree(ctx context.Context, src, dst string, root bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", src)
	}
	if !root {
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", dst, err)
		}
	}
	names, err := readDirNames(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.entry(ctx, filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return c.meta(src, dst, &st)
}

func (c *idCopier) entry(ctx context.Context, src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return c.tree(ctx, src, dst, false)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if first, ok := c.links[st.Ino]; ok {
				if err := unix.Link(first, dst); err != nil {
					return fmt.Errorf("link %s: %w", dst, err)
				}
				return nil
			}
			c.links[st.Ino] = dst
		}
		return c.file(src, dst, &st)
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dst); err != nil {
			return fmt.Errorf("symlink %s: %w", dst, err)
		}
		return c.meta(src, dst, &st)
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return nil // only whiteouts: a sandbox makes no other device
		}
		if err := unix.Mknod(dst, unix.S_IFCHR|0o600, 0); err != nil {
			return fmt.Errorf("whiteout %s: %w", dst, err)
		}
		return c.meta(src, dst, &st)
	case unix.S_IFIFO:
		if err := unix.Mkfifo(dst, 0o600); err != nil {
			return fmt.Errorf("fifo %s: %w", dst, err)
		}
		return c.meta(src, dst, &st)
	}
	return nil // sockets: nothing to keep
}

func (c *idCopier) file(src, dst string, st *unix.Stat_t) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	in := os.NewFile(uintptr(sfd), src)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return c.meta(src, dst, st)
}

// meta gives dst src's owner (shifted), mode, user xattrs and times.
func (c *idCopier) meta(src, dst string, st *unix.Stat_t) error {
	if err := unix.Lchown(dst, c.id(st.Uid), c.id(st.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", dst, err)
	}
	typ := st.Mode & unix.S_IFMT
	if typ != unix.S_IFLNK {
		// After the chown, which clears set-id bits.
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return fmt.Errorf("chmod %s: %w", dst, err)
		}
	}
	if err := copyUserXattrs(src, dst); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times %s: %w", dst, err)
	}
	return nil
}

// copyUserXattrs copies src's user.* xattrs (the sandbox's own and
// overlay's opaque and redirect markers), less overlayPrivate.
func copyUserXattrs(src, dst string) error {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(src, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(src, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(src, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list xattrs of %s: %w", src, err)
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") || overlayPrivate[name] {
			continue
		}
		val := make([]byte, 256)
		m, err := unix.Lgetxattr(src, name, val)
		if errors.Is(err, unix.ERANGE) {
			if m, err = unix.Lgetxattr(src, name, nil); err == nil {
				val = make([]byte, m)
				m, err = unix.Lgetxattr(src, name, val)
			}
		}
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xattr %s of %s: %w", name, src, err)
		}
		if err := unix.Lsetxattr(dst, name, val[:m], 0); err != nil {
			return fmt.Errorf("xattr %s of %s: %w", name, dst, err)
		}
	}
	return nil
}
