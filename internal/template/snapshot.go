package template

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The base pins the host's /usr with a hard-link snapshot: a tree of fresh
// directories whose files are hard links to the host's inodes, taken when the
// base version is built. dpkg never rewrites an installed file in place: it
// writes name.dpkg-new and renames it over name, which replaces the host's
// directory entry but leaves the linked inode, and so the snapshot, as it
// was. A host upgrade therefore changes the fingerprint (it covers
// /var/lib/dpkg/status) and the next start builds a new base version, while
// templates built on the old one keep their /usr. The snapshot costs a
// directory inode per directory and nothing per file.

// usrName is the snapshot's directory beside rootfs in a base version.
const usrName = "usr"

// errCrossDevice reports that a tree cannot be hard-linked into the store
// because they are on different file systems.
var errCrossDevice = errors.New("not on the same file system")

// linkTree mirrors the host directory src at dst (which must not exist):
// directories are created with the host's owner and mode, symlinks are
// copied, regular files are hard-linked, or, with copyXdev, copied when
// linking fails with EXDEV (without it that fails the whole call with
// errCrossDevice). Special files, subtrees on other file systems (mount
// points) and the entries skip returns true for (rel is the slash path
// below src) are left out.
func linkTree(src, dst string, copyXdev bool, skip func(rel string) bool) error {
	var root unix.Stat_t
	if err := unix.Lstat(src, &root); err != nil {
		return fmt.Errorf("stat host %s: %w", src, err)
	}
	if root.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("host %s is not a directory", src)
	}
	var walk func(src, dst, rel string, st *unix.Stat_t) error
	walk = func(src, dst, rel string, st *unix.Stat_t) error {
		if err := mkdir(dst, fs.FileMode(st.Mode&0o777), int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) != 0 {
			if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
				return fmt.Errorf("chmod %s: %w", dst, err)
			}
		}
		names, err := readNames(src)
		if err != nil {
			return err
		}
		for _, name := range names {
			s, d, r := filepath.Join(src, name), filepath.Join(dst, name), name
			if rel != "" {
				r = rel + "/" + name
			}
			if skip != nil && skip(r) {
				continue
			}
			var cst unix.Stat_t
			if err := unix.Lstat(s, &cst); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed while we walk
				}
				return fmt.Errorf("stat host %s: %w", s, err)
			}
			switch cst.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				if cst.Dev != root.Dev {
					continue
				}
				if err := walk(s, d, r, &cst); err != nil {
					return err
				}
			case unix.S_IFLNK:
				target, err := os.Readlink(s)
				if err != nil {
					return fmt.Errorf("read link %s: %w", s, err)
				}
				if err := os.Symlink(target, d); err != nil {
					return fmt.Errorf("create symlink: %w", err)
				}
				if err := os.Lchown(d, int(cst.Uid), int(cst.Gid)); err != nil {
					return fmt.Errorf("chown symlink: %w", err)
				}
			case unix.S_IFREG:
				err := os.Link(s, d)
				switch {
				case err == nil:
				case errors.Is(err, unix.EXDEV) && copyXdev:
					if err := copyFile(s, d, &cst); err != nil {
						return err
					}
				case errors.Is(err, unix.EXDEV):
					return fmt.Errorf("link %s: %w", s, errCrossDevice)
				case errors.Is(err, fs.ErrNotExist):
					// replaced or removed while we walk
				default:
					return fmt.Errorf("link %s: %w", s, err)
				}
			}
		}
		return nil
	}
	return walk(src, dst, "", &root)
}

// readNames lists a directory's entries, sorted.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("read host %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read host %s: %w", dir, err)
	}
	slices.Sort(names)
	return names, nil
}

// copyFile copies the regular file src to dst with the owner and mode of st.
func copyFile(src, dst string, st *unix.Stat_t) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("read host %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create file: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chown(int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = unix.Fchmod(int(out.Fd()), st.Mode&0o7777)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// snapshotUsr pins the host /usr at dst with linkTree. It returns false,
// leaving nothing at dst, when the store is on another file system than the
// host /usr: the base then uses the host /usr in place.
func snapshotUsr(dst string) (bool, error) {
	err := linkTree(hostUsr, dst, false, nil)
	if errors.Is(err, errCrossDevice) {
		if rerr := os.RemoveAll(dst); rerr != nil {
			return false, fmt.Errorf("remove partial /usr snapshot: %w", rerr)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("snapshot host /usr: %w", err)
	}
	return true, nil
}

// packagesFile lists the base's packages ("name=version" lines) in its /etc.
const packagesFile = "warden-base-packages"

// setupPackageManager gives the rootfs what apt and dpkg need to install
// packages in a build step: the host's package database (/var/lib/dpkg,
// linked like /usr so it describes the snapshot, without locks or a
// half-finished update journal), apt's empty lists and caches, debconf's
// cache directory, and /etc/warden-base-packages. /etc/apt itself comes
// with the whitelisted /etc (see etcCopy).
func setupPackageManager(rootfs string) error {
	dpkg := filepath.Join(rootfs, "var/lib/dpkg")
	if _, err := os.Stat(hostDpkg); errors.Is(err, fs.ErrNotExist) {
		// Not a Debian host: no package database to give.
		return writeFile(filepath.Join(rootfs, "etc", packagesFile), nil, 0o644, 0, 0)
	}
	err := linkTree(hostDpkg, dpkg, true, func(rel string) bool {
		return strings.HasPrefix(rel, "lock") || rel == "triggers/Lock" || strings.HasPrefix(rel, "updates/") ||
			strings.HasSuffix(rel, "-old") || rel == "statoverride"
	})
	if err != nil {
		return fmt.Errorf("copy the host package database: %w", err)
	}
	if err := copyStatOverride(dpkg); err != nil {
		return err
	}
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{
		{"var/lib/apt", 0o755}, {"var/lib/apt/lists", 0o755}, {"var/lib/apt/lists/partial", 0o700},
		{"var/cache/apt", 0o755}, {"var/cache/apt/archives", 0o755}, {"var/cache/apt/archives/partial", 0o700},
		{"var/cache/debconf", 0o755}, {"var/log/apt", 0o755},
	} {
		if err := mkdir(filepath.Join(rootfs, d.path), d.mode, 0, 0); err != nil {
			return err
		}
	}
	status, err := os.ReadFile(filepath.Join(dpkg, "status"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read package database: %w", err)
	}
	var list bytes.Buffer
	for _, p := range installedPackages(status) {
		list.WriteString(p + "\n")
	}
	return writeFile(filepath.Join(rootfs, "etc", packagesFile), list.Bytes(), 0o644, 0, 0)
}

// copyStatOverride writes dpkg's statoverride file into the rootfs database
// dpkg without the entries naming users or groups the generated /etc lacks
// (a host group of a human, ...): dpkg refuses to run at all with those.
func copyStatOverride(dpkg string) error {
	data, err := os.ReadFile(filepath.Join(hostDpkg, "statoverride"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read host statoverride: %w", err)
	}
	names := func(file string) []string {
		b, _ := os.ReadFile(filepath.Join(dpkg, "../../../etc", file))
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok {
				out = append(out, name)
			}
		}
		return out
	}
	users, groups := names("passwd"), names("group")
	known := func(name string, names []string) bool {
		return strings.HasPrefix(name, "#") || slices.Contains(names, name)
	}
	var out bytes.Buffer
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && known(f[0], users) && known(f[1], groups) {
			out.WriteString(line + "\n")
		}
	}
	return writeFile(filepath.Join(dpkg, "statoverride"), out.Bytes(), 0o644, 0, 0)
}

// installedPackages returns "name=version" for each installed package of a
// dpkg status file, sorted.
func installedPackages(status []byte) []string {
	var out []string
	var name, version, state string
	flush := func() {
		if name != "" && strings.HasSuffix(state, " installed") {
			out = append(out, name+"="+version)
		}
		name, version, state = "", "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Package":
			name = v
		case "Version":
			version = v
		case "Status":
			state = v
		}
	}
	flush()
	slices.Sort(out)
	return out
}
