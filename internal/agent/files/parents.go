package files

import (
	"errors"
	"path"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// madeDirs is the directories a write made for its file, top first, so a
// failed write can remove them again. Its methods accept a nil receiver.
type madeDirs struct {
	u    *sysuser.User
	dirs []madeDir
}

type madeDir struct {
	path string
	// parent is a descriptor (O_PATH) of the parent of a directory the
	// agent made as root, -1 for one the user made; name is its name there.
	// Removing it through the descriptor cannot be steered elsewhere by a
	// symlink the user swaps into the path meanwhile.
	parent int
	name   string
}

// makeParents creates dir and its missing parents for u, each as u (owned
// by u, the kernel checking u's permissions). With asRoot (envd's uploads),
// a directory u may not create because u may not write to its parent is
// made by the agent as root and handed to u (owner u and u's group, mode
// 0755), as envd does; the directories below it are then u's to make. A
// component u may not search stays an error, as does a component that is
// not a directory. Call it outside AsFS.
func makeParents(u *sysuser.User, dir string, asRoot bool) (*madeDirs, error) {
	var missing []string
	err := u.AsFS(func() error {
		for cur := path.Clean(dir); ; cur = path.Dir(cur) {
			var st unix.Stat_t
			err := unix.Stat(cur, &st)
			if err == nil {
				if st.Mode&unix.S_IFMT != unix.S_IFDIR {
					return invalidf("mkdir %s: %w", cur, unix.ENOTDIR)
				}
				return nil
			}
			if errors.Is(err, unix.ENOTDIR) {
				return invalidf("mkdir %s: a parent is not a directory: %w", dir, err)
			}
			if !errors.Is(err, unix.ENOENT) {
				return pathErr("mkdir", cur, err)
			}
			missing = append(missing, cur)
			if cur == "/" || cur == "." {
				return nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	md := &madeDirs{u: u}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		err := u.AsFS(func() error { return unix.Mkdir(d, 0o755) })
		switch {
		case err == nil:
			md.dirs = append(md.dirs, madeDir{path: d, parent: -1})
			continue
		case errors.Is(err, unix.EEXIST):
			var st unix.Stat_t
			if u.AsFS(func() error { return unix.Stat(d, &st) }) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				continue // raced with another creator
			}
		case asRoot && u.UID != 0 && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)):
			if err = md.mkdirAsRoot(d); err == nil {
				continue
			}
		}
		md.undo()
		return nil, pathErr("mkdir", d, err)
	}
	return md, nil
}

// mkdirAsRoot makes d as the agent and gives it to the user. The parent is
// looked up as the user (an O_PATH descriptor opened inside AsFS), so the
// user reaches nothing through it that the user could not already search;
// only the write permission on it is the agent's. The new directory is
// opened without following a symlink and checked to be the fresh, empty,
// root-owned directory just made before it changes hands.
func (md *madeDirs) mkdirAsRoot(d string) error {
	parent, name := path.Dir(d), path.Base(d)
	pfd := -1
	err := md.u.AsFS(func() (err error) {
		pfd, err = unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return err
	}
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		unix.Close(pfd)
		return err
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(pfd)
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(pfd)
		return err
	}
	if st.Uid != 0 || st.Nlink > 2 {
		unix.Close(pfd)
		return errors.New("the new directory was replaced")
	}
	md.dirs = append(md.dirs, madeDir{path: d, parent: pfd, name: name})
	if err := unix.Fchown(fd, int(md.u.UID), int(md.u.GID)); err != nil {
		return err
	}
	return unix.Fchmod(fd, 0o755)
}

// undo removes the directories made (they are empty unless someone else
// wrote there meanwhile, in which case they stay), deepest first, and
// releases the descriptors. Call it outside AsFS.
func (md *madeDirs) undo() {
	if md == nil {
		return
	}
	for i := len(md.dirs) - 1; i >= 0; i-- {
		d := md.dirs[i]
		if d.parent >= 0 {
			unix.Unlinkat(d.parent, d.name, unix.AT_REMOVEDIR)
		} else {
			md.u.AsFS(func() error { return unix.Rmdir(d.path) })
		}
	}
	md.release()
}

// release keeps the directories and closes the descriptors.
func (md *madeDirs) release() {
	if md == nil {
		return
	}
	for _, d := range md.dirs {
		if d.parent >= 0 {
			unix.Close(d.parent)
		}
	}
	md.dirs = nil
}
