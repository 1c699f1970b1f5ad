package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Local tar archives for `warden cp`. The daemon's archive endpoints move a directory's
// contents as a tar with names relative to the directory ("a.txt", "sub/", "sub/b.txt");
// these functions make and unpack such archives on the local side.
//
// Extraction never writes outside the destination: every operation goes through an
// os.Root, so neither an absolute or ".." name nor a symlink (from the archive or already
// in the destination) can lead out of it; names that try are refused outright.

// entryError is the error of one archive entry.
type entryError struct {
	name string
	err  error
}

func (e *entryError) Error() string { return fmt.Sprintf("archive entry %q: %v", e.name, e.err) }
func (e *entryError) Unwrap() error { return e.err }

// cleanName validates an archive entry name (or hardlink target) and returns it cleaned
// and relative to the destination; "." is the destination itself. Absolute names and names
// with a ".." component are refused even when they would clean to something inside.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("name contains a NUL byte")
	case strings.HasPrefix(name, "/") || strings.HasPrefix(name, `\`) || filepath.IsAbs(name) || filepath.VolumeName(name) != "":
		return "", errors.New("absolute name")
	}
	for _, c := range strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }) {
		if c == ".." {
			return "", errors.New(`name contains ".."`)
		}
	}
	return path.Clean(name), nil
}

// extractOptions tune extractTar.
type extractOptions struct {
	// warn receives one line per entry that is skipped (devices, FIFOs).
	warn func(format string, args ...any)
}

// extractTar unpacks the tar stream r into the directory dst, creating it if missing. It
// refuses (with an *entryError, stopping there) entries with absolute or ".." names,
// hardlinks whose target is absolute, has "..", or is missing, and any entry that would
// be written through a symlink leading out of dst. Symlinks are created as stored and
// never followed. Set-user-ID, set-group-ID and sticky bits are dropped, ownership is not
// restored, and devices and FIFOs are skipped with a warning.
func extractTar(ctx context.Context, r io.Reader, dst string, opt extractOptions) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()

	type dirFix struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var fixes []dirFix
	defer func() {
		// Directory modes last, deepest first, so that a read-only directory does not
		// block its own entries.
		for i := len(fixes) - 1; i >= 0; i-- {
			f := fixes[i]
			_ = root.Chmod(f.name, f.mode)
			if !f.mtime.IsZero() {
				_ = root.Chtimes(f.name, f.mtime, f.mtime)
			}
		}
	}()

	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return &entryError{hdr.Name, err}
		}
		mode := fs.FileMode(hdr.Mode).Perm() // no setuid, setgid or sticky
		fail := func(err error) error { return &entryError{hdr.Name, err} }

		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := mkdirIn(root, name); err != nil {
					return fail(err)
				}
			}
			fixes = append(fixes, dirFix{name, mode, hdr.ModTime})

		case tar.TypeReg, tar.TypeRegA:
			if name == "." {
				return fail(errors.New("a file cannot replace the destination directory"))
			}
			if err := prepareLeaf(root, name); err != nil {
				return fail(err)
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o200)
			if err != nil {
				return fail(err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fail(err)
			}
			if mode&0o200 == 0 {
				if err := root.Chmod(name, mode); err != nil {
					return fail(err)
				}
			}
			if !hdr.ModTime.IsZero() {
				_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}

		case tar.TypeSymlink:
			if name == "." {
				return fail(errors.New("a symlink cannot replace the destination directory"))
			}
			if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return fail(errors.New("bad symlink target"))
			}
			if err := prepareLeaf(root, name); err != nil {
				return fail(err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fail(err)
			}

		case tar.TypeLink:
			if name == "." {
				return fail(errors.New("a link cannot replace the destination directory"))
			}
			target, err := cleanName(hdr.Linkname)
			if err != nil {
				return fail(fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err))
			}
			if err := prepareLeaf(root, name); err != nil {
				return fail(err)
			}
			if err := root.Link(target, name); err != nil {
				return fail(err)
			}

		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if opt.warn != nil {
				opt.warn("skipping %s: devices and FIFOs are not extracted", hdr.Name)
			}

		default:
			if opt.warn != nil {
				opt.warn("skipping %s: unsupported entry type %q", hdr.Name, hdr.Typeflag)
			}
		}
	}
}

// mkdirIn creates the directory name and its parents inside root; an existing directory
// is fine, anything else in the way is an error.
func mkdirIn(root *os.Root, name string) error {
	if err := root.MkdirAll(name, 0o755); err != nil {
		return err
	}
	st, err := root.Lstat(name)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

// prepareLeaf makes room for a new file, symlink or hardlink at name: it creates the
// parent directories and removes whatever non-directory is there, so that creating it
// never follows an existing symlink.
func prepareLeaf(root *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := mkdirIn(root, dir); err != nil {
			return err
		}
	}
	st, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("a directory is in the way")
	}
	return root.Remove(name)
}

// writeTar writes the contents of the local directory src to w as a tar with names
// relative to src. Symlinks are stored as symlinks and never followed; everything is read
// through an os.Root, so a symlink swapped in meanwhile cannot pull in files from outside
// src. Sockets, devices and FIFOs are skipped with a warning.
func writeTar(ctx context.Context, w io.Writer, src string, warn func(format string, args ...any)) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		info, err := root.Lstat(name)
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			if warn != nil {
				warn("skipping %s: only files, directories and symlinks are copied", filepath.Join(src, name))
			}
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(name)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(name, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew meanwhile is cut at the size in its header; one that shrank
		// fails the copy.
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("read %s: %w", filepath.Join(src, name), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
