package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
)

// Pre-copy (backend.PreCapturer): the first pass copies each writable
// layer while the sandbox runs, recording what it saw of each regular file
// it copied (inode, size, mode, owner, mtime and ctime, taken before the
// copy); the second pass, with the sandbox frozen, walks the layer again
// and makes the copy equal to it: a regular file whose stat is unchanged
// keeps its first-pass copy, everything else (new or changed files,
// directories' metadata, symlinks, whiteouts, hard-linked files) is copied
// again, and what the layer no longer holds is removed. Any change to a
// file moves its ctime (and a stat marks the inode so that the next change
// gets a distinct ctime on kernels with multigrain timestamps); a file
// whose ctime was within preCopyRecent of the first pass's stat is copied
// again anyway, against coarse timestamps. The freeze then lasts as long
// as a walk of the layer plus the copy of what changed during the first
// pass. WARDEN_SNAPSHOT_PRECOPY=off in wardend's environment turns the
// pre-copy off (one frozen copy, as before; for benchmarks).

var _ backend.PreCapturer = (*Backend)(nil)

// preCopyRecent: a file changed this shortly before the first pass looked
// at it is copied again by the frozen pass.
const preCopyRecent = 50 * time.Millisecond

// captureSource is one writable layer to copy: its target and its upper
// directory on the host.
type captureSource struct {
	target, src string
}

// captureSources checks that sandbox h's writable layers can be copied and
// lists them.
func (b *Backend) captureSources(h backend.Handle) (*box, []captureSource, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, nil, err
	}
	if !bx.state.Disk {
		return nil, nil, fmt.Errorf("%w: sandbox %s keeps its writable layer in memory (no disk images: disk_dir), which the host cannot copy", backend.ErrUnsupported, bx.id)
	}
	spec, err := b.specOf(bx)
	if err != nil {
		return nil, nil, err
	}
	if len(spec.Uppers) > 0 {
		return nil, nil, fmt.Errorf("%w: sandbox %s captures its writable layer (a template build)", backend.ErrUnsupported, bx.id)
	}
	stage := filepath.Join(bx.state.Dir, "stage")
	var out []captureSource
	for i, t := range upperTargets(spec.Layers) {
		out = append(out, captureSource{target: t, src: filepath.Join(stage, "u"+strconv.Itoa(i))})
	}
	return bx, out, nil
}

// PreCaptureFS implements backend.PreCapturer.
func (b *Backend) PreCaptureFS(ctx context.Context, h backend.Handle, dir func(target string) (string, error), freeze func(context.Context) (func(), error)) error {
	bx, srcs, err := b.captureSources(h)
	if err != nil {
		return err
	}
	if os.Getenv("WARDEN_SNAPSHOT_PRECOPY") == "off" {
		// The benchmark's "before": frozen for the whole copy.
		thaw, err := freeze(ctx)
		if err != nil {
			return fmt.Errorf("freeze for the copy: %w", err)
		}
		defer thaw()
		return b.CaptureFS(ctx, h, dir)
	}
	dsts := map[string]string{}
	pc := &preCopier{c: &idCopier{base: bx.state.UIDBase, size: bx.state.UIDRange, links: map[uint64]string{}}, seen: map[string]seenFile{}}
	// Pass 1, live.
	for _, s := range srcs {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := readDirNames(s.src)
		if err != nil || len(names) == 0 {
			continue // nothing written under this target yet, or it moves: the frozen pass decides
		}
		dst, err := dir(s.target)
		if err != nil {
			return err
		}
		dsts[s.target] = dst
		pc.live(ctx, s.src, dst)
	}
	thaw, err := freeze(ctx)
	if err != nil {
		return fmt.Errorf("freeze for the copy: %w", err)
	}
	defer thaw()
	// Pass 2, frozen.
	pc.c.links = map[uint64]string{}
	for _, s := range srcs {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := readDirNames(s.src)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("capture %s: %w", s.target, err)
		}
		dst, ok := dsts[s.target]
		if len(names) == 0 {
			if ok { // emptied since the first pass
				if err := clearDir(dst); err != nil {
					return fmt.Errorf("capture %s: %w", s.target, err)
				}
			}
			continue
		}
		if !ok {
			if dst, err = dir(s.target); err != nil {
				return err
			}
		}
		if err := pc.sync(ctx, s.src, dst, true); err != nil {
			return fmt.Errorf("capture %s: %w", s.target, err)
		}
	}
	return nil
}

// seenFile is what the first pass saw of a regular file it copied.
type seenFile struct {
	ino, size    int64
	mode         uint32
	uid, gid     uint32
	mtime, ctime unix.Timespec
	at           time.Time
}

func seenOf(st *unix.Stat_t) seenFile {
	return seenFile{ino: int64(st.Ino), size: st.Size, mode: st.Mode, uid: st.Uid, gid: st.Gid, mtime: st.Mtim, ctime: st.Ctim}
}

// preCopier copies a layer in two passes (see above); seen is keyed by the
// destination path.
type preCopier struct {
	c    *idCopier
	seen map[string]seenFile
}

// live is the first pass: a best-effort copy of directory src (which may
// change under it) into dst, which exists. It copies directories and
// single-link regular files, and records each file's stat; whatever fails
// is left for the frozen pass.
func (p *preCopier) live(ctx context.Context, src, dst string) {
	names, err := readDirNames(src)
	if err != nil {
		return
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		s, d := filepath.Join(src, name), filepath.Join(dst, name)
		var st unix.Stat_t
		if unix.Lstat(s, &st) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if unix.Mkdir(d, 0o700) == nil {
				p.live(ctx, s, d)
			}
		case unix.S_IFREG:
			if st.Nlink > 1 {
				continue
			}
			seen := seenOf(&st)
			seen.at = time.Now()
			if err := p.c.file(s, d, &st); err != nil {
				os.RemoveAll(d)
				continue
			}
			p.seen[d] = seen
		}
	}
}

// sync is the frozen pass: it makes dst (a directory, which exists when
// root is set) a copy of directory src, reusing the first pass's copies of
// unchanged files.
func (p *preCopier) sync(ctx context.Context, src, dst string, root bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", src)
	}
	if !root {
		var dt unix.Stat_t
		err := unix.Lstat(dst, &dt)
		if err == nil && dt.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
			err = unix.ENOENT
		}
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdir(dst, 0o700); err != nil {
				return fmt.Errorf("mkdir %s: %w", dst, err)
			}
		} else if err != nil {
			return err
		}
	}
	names, err := readDirNames(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	// What the layer no longer holds.
	old, err := readDirNames(dst)
	if err != nil {
		return fmt.Errorf("read %s: %w", dst, err)
	}
	for _, n := range old {
		if !keep[n] {
			if err := os.RemoveAll(filepath.Join(dst, n)); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, d := filepath.Join(src, name), filepath.Join(dst, name)
		var cst unix.Stat_t
		if err := unix.Lstat(s, &cst); err != nil {
			return err
		}
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := p.sync(ctx, s, d, false); err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
			if p.unchanged(d, &cst) {
				continue
			}
		}
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := p.c.entry(ctx, s, d); err != nil {
			return err
		}
	}
	return p.c.meta(src, dst, &st)
}

// unchanged reports whether the first pass's copy d of the regular file
// whose stat is now st still holds it.
func (p *preCopier) unchanged(d string, st *unix.Stat_t) bool {
	seen, ok := p.seen[d]
	if !ok || st.Nlink > 1 {
		return false
	}
	now := seenOf(st)
	now.at = seen.at
	if now != seen {
		return false
	}
	if time.Unix(seen.ctime.Unix()).After(seen.at.Add(-preCopyRecent)) {
		return false // changed just before it was looked at: coarse timestamps may hide a later change
	}
	var dt unix.Stat_t
	return unix.Lstat(d, &dt) == nil && dt.Mode&unix.S_IFMT == unix.S_IFREG && dt.Size == st.Size
}

// clearDir removes what directory dir holds.
func clearDir(dir string) error {
	names, err := readDirNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}
