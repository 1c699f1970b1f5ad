package sysuser

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UserName returns the name of uid in the sandbox's /etc/passwd (PasswdFile),
// or uid in decimal when no entry has it.
func UserName(uid uint32) string {
	if n, ok := passwdNames.name(PasswdFile, uid); ok {
		return n
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// GroupName returns the name of gid in the sandbox's /etc/group (GroupFile),
// or gid in decimal when no entry has it.
func GroupName(gid uint32) string {
	if n, ok := groupNames.name(GroupFile, gid); ok {
		return n
	}
	return strconv.FormatUint(uint64(gid), 10)
}

var passwdNames, groupNames idNames

// idNames caches an id → name table read from a passwd- or group-format file
// (name in the first field, id in the third). The table is re-read when the
// file changes (path, inode, size or modification time), so a useradd inside
// the sandbox shows up without an explicit Forget, and listing a large
// directory reads the file once.
type idNames struct {
	mu    sync.Mutex
	key   fileKey
	names map[uint32]string
}

type fileKey struct {
	path  string
	dev   uint64
	ino   uint64
	size  int64
	mtime time.Time
}

func (c *idNames) name(file string, id uint32) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(file)
	if err != nil {
		c.key, c.names = fileKey{}, nil
		return "", false
	}
	k := fileKey{path: file, size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.dev, k.ino = uint64(st.Dev), st.Ino
	}
	if c.names == nil || k != c.key {
		c.names = readIDNames(file)
		c.key = k
	}
	n, ok := c.names[id]
	return n, ok
}

func readIDNames(file string) map[uint32]string {
	m := map[uint32]string{}
	f, err := os.Open(file)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 3 || fs[0] == "" || strings.HasPrefix(fs[0], "#") {
			continue
		}
		id, err := strconv.ParseUint(fs[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := m[uint32(id)]; !dup { // first entry wins, as with getpwuid
			m[uint32(id)] = fs[0]
		}
	}
	return m
}
