package files

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

// metaPrefix is the xattr namespace of E2B file metadata.
const metaPrefix = "user.e2b."

// entryInfo lstats p (an absolute sandbox path) and describes it. It runs
// with the caller's identity: call it inside AsFS.
func entryInfo(p string) (*pb.EntryInfo, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, pathErr("stat", p, err)
	}
	return entryFromStat(p, &st), nil
}

func entryFromStat(p string, st *unix.Stat_t) *pb.EntryInfo {
	name := path.Base(p)
	e := &pb.EntryInfo{
		Name:         name,
		Type:         fileType(st.Mode),
		Path:         p,
		Size:         st.Size,
		Mode:         st.Mode & 0o7777,
		Permissions:  permString(st.Mode),
		Owner:        sysuser.UserName(st.Uid),
		Group:        sysuser.GroupName(st.Gid),
		ModifiedTime: timestamppb.New(time.Unix(st.Mtim.Unix())),
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if t, ok := symlinkTarget(p); ok {
			e.SymlinkTarget = &t
		}
	}
	if md := readMetadata(p); len(md) > 0 {
		e.Metadata = md
	}
	return e
}

// symlinkTarget is what the symlink p points at, as envd reports it: the
// absolute path with every link resolved (filepath.EvalSymlinks). A link
// that cannot be resolved (dangling, a loop, a component the user may not
// search) reports its own text made absolute against the link's directory,
// so the target is always an absolute, cleaned path.
func symlinkTarget(p string) (string, bool) {
	if t, err := filepath.EvalSymlinks(p); err == nil {
		if !path.IsAbs(t) {
			return "", false // p is absolute, so this cannot happen
		}
		return t, true
	}
	raw, err := os.Readlink(p)
	if err != nil {
		return "", false
	}
	if !path.IsAbs(raw) {
		raw = path.Join(path.Dir(p), raw)
	}
	return path.Clean(raw), true
}

func fileType(mode uint32) pb.FileType {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return pb.FileType_FILE_TYPE_FILE
	case unix.S_IFDIR:
		return pb.FileType_FILE_TYPE_DIRECTORY
	case unix.S_IFLNK:
		return pb.FileType_FILE_TYPE_SYMLINK
	default: // FIFO, socket, device: no FileType for them
		return pb.FileType_FILE_TYPE_UNSPECIFIED
	}
}

// permString renders mode the way ls -l does: "-rw-r--r--", "drwxrwxrwt",
// "lrwxrwxrwx", "-rwsr-xr-x".
func permString(mode uint32) string {
	var b [10]byte
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		b[0] = 'd'
	case unix.S_IFLNK:
		b[0] = 'l'
	case unix.S_IFIFO:
		b[0] = 'p'
	case unix.S_IFSOCK:
		b[0] = 's'
	case unix.S_IFCHR:
		b[0] = 'c'
	case unix.S_IFBLK:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(bit uint32, i int, set, unsetExec byte) {
		if mode&bit == 0 {
			return
		}
		if b[i] == 'x' {
			b[i] = set
		} else {
			b[i] = unsetExec
		}
	}
	special(unix.S_ISUID, 3, 's', 'S')
	special(unix.S_ISGID, 6, 's', 'S')
	special(unix.S_ISVTX, 9, 't', 'T')
	return string(b[:])
}

// readMetadata returns the user.e2b.* xattrs of p (not following a final
// symlink) with the prefix stripped. Unreadable or unsupported xattrs give
// no metadata rather than an error.
func readMetadata(p string) map[string]string {
	names, err := listXattrs(p)
	if err != nil {
		return nil
	}
	var md map[string]string
	for _, n := range names {
		if !strings.HasPrefix(n, metaPrefix) {
			continue
		}
		v, err := getXattr(p, n)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[strings.TrimPrefix(n, metaPrefix)] = v
	}
	return md
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Llistxattr(p, nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz+64)
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
}

func getXattr(p, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Lgetxattr(p, name, nil)
			if err != nil {
				return "", err
			}
			buf = make([]byte, sz+64)
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}
