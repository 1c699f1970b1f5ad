package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// mkdirAll creates p and its missing parents with perm (subject to the umask)
// and returns the directories it created, top first. Existing components may
// be symlinks to directories. A component that exists and is not a directory
// fails with ENOTDIR. Run it inside AsFS: new directories belong to the
// acting user.
func mkdirAll(p string, perm uint32) ([]string, error) {
	var missing []string
	for cur := path.Clean(p); ; cur = path.Dir(cur) {
		var st unix.Stat_t
		err := unix.Stat(cur, &st)
		if err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return nil, invalidf("mkdir %s: %w", cur, unix.ENOTDIR)
			}
			break
		}
		if errors.Is(err, unix.ENOTDIR) {
			return nil, invalidf("mkdir %s: a parent is not a directory: %w", p, err)
		}
		if !errors.Is(err, unix.ENOENT) {
			return nil, pathErr("mkdir", cur, err)
		}
		missing = append(missing, cur)
		if cur == "/" || cur == "." {
			break
		}
	}
	var created []string
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		err := unix.Mkdir(d, perm)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if unix.Stat(d, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				continue // raced with another creator
			}
		}
		if err != nil {
			removeDirs(created)
			return nil, pathErr("mkdir", d, err)
		}
		created = append(created, d)
	}
	return created, nil
}

// removeDirs removes the (empty) directories mkdirAll created, deepest first.
func removeDirs(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		unix.Rmdir(created[i])
	}
}

// tempName is a fresh hidden name next to dst.
func tempName(dst string) string {
	var b [8]byte
	rand.Read(b[:])
	base := path.Base(dst)
	if len(base) > 128 {
		base = base[:128]
	}
	return path.Join(path.Dir(dst), "."+base+".warden-"+hex.EncodeToString(b[:]))
}

// isTempName reports whether a file name is one tempName makes.
func isTempName(name string) bool {
	const tag = ".warden-"
	n := len(name)
	if n < 1+len(tag)+16 || name[0] != '.' || name[n-16-len(tag):n-16] != tag {
		return false
	}
	_, err := hex.DecodeString(name[n-16:])
	return err == nil
}

// writeTemp writes r to a new temporary file next to dst, sets its mode and
// user.e2b.* metadata, fsyncs and closes it, and returns its name. On error
// nothing is left behind. Errors name dst, never the temporary file.
func writeTemp(dst string, r io.Reader, mode uint32, md map[string]string) (_ string, err error) {
	tmp := tempName(dst)
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", pathErr("create", dst, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if err != nil {
			f.Close()
			unix.Unlink(tmp)
		}
	}()
	if _, err = io.Copy(f, r); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Path == tmp {
			return "", pathErr("write", dst, err)
		}
		return "", invalidf("read request body for %s: %w", dst, err)
	}
	if err = unix.Fchmod(fd, mode&0o7777); err != nil {
		return "", pathErr("chmod", dst, err)
	}
	for k, v := range md {
		if err = unix.Fsetxattr(fd, metaPrefix+k, []byte(v), 0); err != nil {
			return "", pathErr("set metadata on", dst, err)
		}
	}
	if err = f.Sync(); err != nil {
		return "", pathErr("sync", dst, err)
	}
	if err = f.Close(); err != nil {
		return "", pathErr("close", dst, err)
	}
	return tmp, nil
}

// commit renames tmp over dst and syncs the directory.
func commit(tmp, dst string) error {
	if err := unix.Rename(tmp, dst); err != nil {
		unix.Unlink(tmp)
		return pathErr("rename to", dst, err)
	}
	if d, err := os.Open(path.Dir(dst)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// copyTree copies src to the new path dst without following symlinks:
// directories recursively, regular files, symlinks. Used by Move across
// filesystems. Copies belong to the acting user; modes and times are kept.
func copyTree(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return pathErr("stat", src, err)
	}
	mtime := time.Unix(st.Mtim.Unix())
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return pathErr("mkdir", dst, err)
		}
		d, err := os.Open(src)
		if err != nil {
			return pathErr("open", src, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return pathErr("read", src, err)
		}
		for _, n := range names {
			if err := copyTree(path.Join(src, n), path.Join(dst, n)); err != nil {
				return err
			}
		}
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return pathErr("chmod", dst, err)
		}
		os.Chtimes(dst, mtime, mtime)
		return nil
	case unix.S_IFREG:
		in, err := openRegular(src, true)
		if err != nil {
			return err
		}
		defer in.Close()
		fd, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return pathErr("create", dst, err)
		}
		out := os.NewFile(uintptr(fd), dst)
		defer out.Close()
		if _, err := io.Copy(out, in); err != nil {
			return pathErr("copy", src, err)
		}
		if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
			return pathErr("chmod", dst, err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
		unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
		return out.Close()
	case unix.S_IFLNK:
		t, err := os.Readlink(src)
		if err != nil {
			return pathErr("readlink", src, err)
		}
		if err := unix.Symlink(t, dst); err != nil {
			return pathErr("symlink", dst, err)
		}
		return nil
	default:
		return invalidf("cannot move %s across filesystems: not a regular file, directory or symlink", src)
	}
}

// openRegular opens p for reading and makes sure it is a regular file before
// anything is read: O_NONBLOCK so a FIFO cannot block the open, fstat on the
// descriptor so a swap after a check cannot fool it. nofollow refuses a final
// symlink. Devices, FIFOs and sockets fail with an errInvalid error; a
// directory fails with EISDIR.
func openRegular(p string, nofollow bool) (*os.File, error) {
	var st unix.Stat_t
	// Check first so a device is not even opened in the common case.
	stat := unix.Stat
	if nofollow {
		stat = unix.Lstat
	}
	if err := stat(p, &st); err != nil {
		return nil, pathErr("open", p, err)
	}
	if err := checkRegular(p, st.Mode); err != nil {
		return nil, err
	}
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if nofollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(p, flags, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) && nofollow {
			return nil, invalidf("%s is a symlink", p)
		}
		return nil, pathErr("open", p, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, pathErr("stat", p, err)
	}
	if err := checkRegular(p, st.Mode); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Regular files ignore O_NONBLOCK, but clear it anyway.
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), p), nil
}

func checkRegular(p string, mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return pathErr("open", p, unix.EISDIR)
	case unix.S_IFLNK:
		return invalidf("%s is a symlink", p)
	default:
		return invalidf("%s is not a regular file", p)
	}
}
