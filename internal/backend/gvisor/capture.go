package gvisor

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// Filesystem snapshots (backend.FSCapturer).
//
// The writable layer of "/" is a tmpfs inside gVisor's kernel (its pages in
// the overlay's filestore or in gVisor's memory): the host cannot read it
// as files. CaptureFS asks the sentry for it: runsc pause stops every task,
// runsc tar rootfs-upper streams the root overlay's upper layer as a tar
// (gVisor's tmpfs TarUpperLayer: every file with its mode, owner, times,
// xattrs and hard links; whiteouts are 0/0 character devices and opaque
// directories carry trusted.overlay.opaque=y, as in a Linux overlay), and
// runsc resume lets it run on. The copy is one moment of the files, taken
// without writing the sandbox's memory to disk (Pause would: the caller
// must not pause a gvisor sandbox for the copy, see backend.LiveCapturer).
//
// The tar becomes a layer in the form template layers take: the ids are
// those the sandbox sees (gVisor's kernel keeps them as they are), opaque
// markers become user.overlay.opaque (the form the host's overlays read
// with userxattr), the sandbox's own user.* xattrs are kept but never
// user.overlay.* ones it set itself, other xattrs (trusted.*, security.*)
// are dropped as on native. The backend's own directory (/.warden) is left
// out. The tar comes from the sentry, so it is read as untrusted: names
// must be relative and clean, no entry is written through a symlink or
// outside the layer, and only whiteout devices are made.
//
// Only the layer of "/" is captured. The writable layers of deeper targets
// (the base template's /usr) are tmpfs mounts the init made inside the
// sandbox, which runsc cannot export: what the sandbox changed under them
// is not in the snapshot (docs/persistence.md). A paused gvisor sandbox is
// a checkpoint on disk with no kernel to ask: it is refused (resume it
// first).

var (
	_ backend.FSCapturer   = (*Backend)(nil)
	_ backend.LiveCapturer = (*Backend)(nil)
)

// CapturesLive implements backend.LiveCapturer.
func (b *Backend) CapturesLive() {}

// CaptureFS implements backend.FSCapturer.
func (b *Backend) CaptureFS(ctx context.Context, h backend.Handle, dir func(target string) (string, error)) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.onDisk.Load() || bx.paused.Load() {
		return fmt.Errorf("%w: sandbox %s is paused (written to disk, no kernel to copy its files from): resume it first", backend.ErrUnsupported, bx.id)
	}
	if bx.state.Kept || !bx.running() {
		return fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	spec, err := b.specOf(bx)
	if err != nil {
		return err
	}
	// gVisor's tar holds each file in the sentry's memory (capturemem.go).
	bx.memMu.Lock()
	bx.capturing = true
	err = b.raiseMemory(bx, captureAllowance(spec.Limits.DiskBytes))
	bx.memMu.Unlock()
	defer func() {
		bx.memMu.Lock()
		bx.capturing = false
		bx.memMu.Unlock()
		go b.lowerMemory(bx)
	}()
	if err != nil {
		return fmt.Errorf("capture %s: room in the host's memory for the copy: %w", bx.id, err)
	}
	r := b.runscFor(bx.state, 1)
	if _, err := r.run(ctx, "pause", bx.id); err != nil {
		return fmt.Errorf("capture %s: %w", bx.id, err)
	}
	defer func() {
		if _, err := r.run(context.WithoutCancel(ctx), "resume", bx.id); err != nil {
			b.logf(bx, "resume after a filesystem capture: %v", err)
		}
	}()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// runsc prints a line on its stdout before the tar: the tar goes to a
	// pipe of its own, which runsc opens as /dev/fd/3 and hands to the
	// sentry.
	out, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("capture %s: %w", bx.id, err)
	}
	defer out.Close()
	cmd := r.command(cctx, "tar", "rootfs-upper", "--file=/dev/fd/3", bx.id)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("capture %s: runsc tar: %w", bx.id, err)
	}
	x := &layerWriter{root: -1, dir: func() (string, error) { return dir("/") }}
	err = x.extract(cctx, out)
	x.close()
	// The rest of the tar is read even after an error: the sentry writes
	// it, and must not find the pipe closed.
	io.Copy(io.Discard, out)
	if err != nil {
		cmd.Wait()
		return fmt.Errorf("capture %s: %w", bx.id, err)
	}
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return fmt.Errorf("capture %s: runsc tar rootfs-upper: %w: %s", bx.id, err, msg)
	}
	return nil
}

// layerWriter writes a tar of an overlay upper layer as a layer directory.
// The directory is asked for (dir) at the first entry that is not the root,
// so an untouched layer makes none.
type layerWriter struct {
	dir   func() (string, error)
	root  int // the layer's directory, -1 until made
	rootH *tar.Header
	dirs  []dirMeta // applied last, deepest first: children change mtimes
	// whiteouts are the names of whiteouts seen, kept or not: gVisor makes
	// every whiteout a hard link of its first, which may be under the
	// skipped /.warden; a link to one becomes a whiteout of its own.
	whiteouts map[string]bool
}

type dirMeta struct {
	rel string
	hdr *tar.Header
}

// opaqueXattr marks an opaque directory in gVisor's overlay.
const opaqueXattr = "trusted.overlay.opaque"

func (x *layerWriter) close() {
	if x.root >= 0 {
		unix.Close(x.root)
	}
	x.root = -1
}

func (x *layerWriter) extract(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the layer's tar: %w", err)
		}
		rel, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == "." {
			if hdr.Typeflag != tar.TypeDir {
				return fmt.Errorf("the layer's root is not a directory")
			}
			x.rootH = hdr
			continue
		}
		if isWhiteout(hdr) {
			if x.whiteouts == nil {
				x.whiteouts = map[string]bool{}
			}
			x.whiteouts[rel] = true
		}
		if rel == ".warden" || strings.HasPrefix(rel, ".warden/") {
			continue // the backend's own directory
		}
		if x.root < 0 {
			d, err := x.dir()
			if err != nil {
				return err
			}
			if x.root, err = unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
				return fmt.Errorf("open %s: %w", d, err)
			}
		}
		if err := x.entry(hdr, rel, tr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	if x.root < 0 {
		return nil // nothing written under "/"
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		if err := x.meta(x.dirs[i].rel, x.dirs[i].hdr); err != nil {
			return fmt.Errorf("%s: %w", x.dirs[i].rel, err)
		}
	}
	if x.rootH != nil {
		if err := x.metaAt(x.root, ".", x.rootH); err != nil {
			return fmt.Errorf("the layer's root: %w", err)
		}
	}
	return nil
}

// cleanName checks a tar entry's name: relative, clean, within the layer.
func cleanName(name string) (string, error) {
	n := strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
	if n == "." || n == "" {
		return ".", nil
	}
	if strings.HasPrefix(n, "/") || path.Clean(n) != n || n == ".." || strings.HasPrefix(n, "../") || strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("the layer's tar names %q", name)
	}
	return n, nil
}

// parent opens the directory that holds rel, one component at a time and
// never through a symlink; the caller closes it.
func (x *layerWriter) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := unix.Dup(x.root)
	if err != nil {
		return -1, "", err
	}
	for _, c := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("open %s: %w", dir, err)
		}
		fd = nfd
	}
	return fd, base, nil
}

func (x *layerWriter) entry(hdr *tar.Header, rel string, tr *tar.Reader) error {
	pfd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirMeta{rel: rel, hdr: hdr})
		return nil
	case tar.TypeReg:
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeLink:
		old, err := cleanName(hdr.Linkname)
		if err != nil || old == "." {
			return fmt.Errorf("hard link to %q", hdr.Linkname)
		}
		if x.whiteouts[old] {
			if err := unix.Mknodat(pfd, base, unix.S_IFCHR|0o600, 0); err != nil {
				return err
			}
			return x.metaAt(pfd, base, &tar.Header{Typeflag: tar.TypeChar, ModTime: hdr.ModTime})
		}
		ofd, obase, err := x.parent(old)
		if err != nil {
			return err
		}
		err = unix.Linkat(ofd, obase, pfd, base, 0)
		unix.Close(ofd)
		return err // a link shares its first name's metadata
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return err
		}
	case tar.TypeChar:
		if !isWhiteout(hdr) {
			return nil // only whiteouts: a sandbox makes no other device here
		}
		if err := unix.Mknodat(pfd, base, unix.S_IFCHR|0o600, 0); err != nil {
			return err
		}
	case tar.TypeFifo:
		if err := unix.Mkfifoat(pfd, base, 0o600); err != nil {
			return err
		}
	default:
		return nil // block devices and anything else: nothing to keep
	}
	return x.metaAt(pfd, base, hdr)
}

// isWhiteout reports whether hdr is an overlay whiteout (a 0/0 character
// device).
func isWhiteout(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0
}

// meta applies hdr's metadata to rel.
func (x *layerWriter) meta(rel string, hdr *tar.Header) error {
	pfd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return x.metaAt(pfd, base, hdr)
}

// metaAt gives name in directory pfd hdr's owner, mode, xattrs and times.
func (x *layerWriter) metaAt(pfd int, name string, hdr *tar.Header) error {
	if err := unix.Fchownat(pfd, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// Regular files, directories, fifos and whiteouts: after the chown,
		// which clears set-id bits; through an O_PATH descriptor so that no
		// symlink is followed.
		fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), uint32(hdr.Mode)&0o7777)
		if err == nil && (hdr.Typeflag == tar.TypeDir || hdr.Typeflag == tar.TypeReg) {
			err = setXattrs(fd, hdr)
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	mt := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	at := mt
	if !hdr.AccessTime.IsZero() {
		at = unix.NsecToTimespec(hdr.AccessTime.UnixNano())
	}
	if err := unix.UtimesNanoAt(pfd, name, []unix.Timespec{at, mt}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}

// setXattrs sets the layer's xattrs of an entry (fd: an O_PATH descriptor
// of a directory or regular file): the opaque marker in the userxattr form,
// and the sandbox's user.* ones but user.overlay.*.
func setXattrs(fd int, hdr *tar.Header) error {
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		switch {
		case name == opaqueXattr:
			if v != "y" {
				continue
			}
			name = "user.overlay.opaque"
		case strings.HasPrefix(name, "user.overlay."):
			continue
		case strings.HasPrefix(name, "user."):
		default:
			continue
		}
		if err := unix.Setxattr(p, name, []byte(v), 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}
