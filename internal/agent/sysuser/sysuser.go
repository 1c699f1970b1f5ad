// Package sysuser resolves the sandbox's Unix users for the agent: lookup in
// the sandbox's own /etc/passwd and /etc/group (never the host's), the acting
// user of a request (E2B's "Authorization: Basic base64(user:)" header), path
// resolution relative to that user's home, and running file operations with
// the user's filesystem identity.
package sysuser

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrUnknownUser is returned for a user name absent from /etc/passwd.
var ErrUnknownUser = errors.New("unknown user")

// User is a sandbox user.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Shell  string
	Groups []uint32 // supplementary groups from /etc/group
}

// Files lets tests point lookups at other files.
var (
	PasswdFile = "/etc/passwd"
	GroupFile  = "/etc/group"
)

var cache sync.Map // name -> *User; /etc/passwd rarely changes, but re-read on miss

// Lookup finds a user by name (or by numeric uid given as a string).
func Lookup(name string) (*User, error) {
	if u, ok := cache.Load(name); ok {
		return u.(*User), nil
	}
	u, err := lookup(name)
	if err != nil {
		return nil, err
	}
	cache.Store(name, u)
	return u, nil
}

// Forget clears the lookup cache (after useradd inside the sandbox, say).
func Forget() { cache.Clear() }

func lookup(name string) (*User, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty name", ErrUnknownUser)
	}
	// "user:group" (a Dockerfile USER): the user, with group as primary.
	if u, g, ok := strings.Cut(name, ":"); ok {
		usr, err := lookup(u)
		if err != nil {
			return nil, err
		}
		gid, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			if gid, err = groupID(g); err != nil {
				return nil, err
			}
		}
		c := *usr
		c.GID, c.Groups = uint32(gid), []uint32{uint32(gid)}
		return &c, nil
	}
	u, err := lookupPasswd(name)
	if err == nil {
		return u, nil
	}
	// Images without /etc/passwd, or without an entry: root and numeric
	// ids still work, as in Docker (group 0, home /).
	if name == "root" {
		return &User{Name: "root", Home: "/root", Shell: "/bin/sh", Groups: []uint32{0}}, nil
	}
	if uid, perr := strconv.ParseUint(name, 10, 32); perr == nil {
		return &User{Name: name, UID: uint32(uid), Home: "/", Shell: "/bin/sh", Groups: []uint32{0}}, nil
	}
	return nil, err
}

// groupID finds a group by name in /etc/group.
func groupID(name string) (uint64, error) {
	b, err := os.ReadFile(GroupFile)
	if err != nil {
		return 0, fmt.Errorf("%w: group %q: %w", ErrUnknownUser, name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Split(line, ":")
		if len(fs) >= 3 && fs[0] == name {
			return strconv.ParseUint(fs[2], 10, 32)
		}
	}
	return 0, fmt.Errorf("%w: group %q", ErrUnknownUser, name)
}

func lookupPasswd(name string) (*User, error) {
	f, err := os.Open(PasswdFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: read passwd: %w", ErrUnknownUser, name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 7 || (fs[0] != name && fs[2] != name) {
			continue
		}
		uid, err1 := strconv.ParseUint(fs[2], 10, 32)
		gid, err2 := strconv.ParseUint(fs[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		u := &User{Name: fs[0], UID: uint32(uid), GID: uint32(gid), Home: fs[5], Shell: fs[6]}
		if u.Home == "" {
			u.Home = "/"
		}
		u.Groups = groupsOf(u.Name, u.GID)
		return u, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownUser, name)
}

func groupsOf(name string, primary uint32) []uint32 {
	gs := []uint32{primary}
	f, err := os.Open(GroupFile)
	if err != nil {
		return gs
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 4 {
			continue
		}
		for _, m := range strings.Split(fs[3], ",") {
			if m == name {
				if gid, err := strconv.ParseUint(fs[2], 10, 32); err == nil && uint32(gid) != primary {
					gs = append(gs, uint32(gid))
				}
			}
		}
	}
	return gs
}

// FromRequest returns the acting user of an agent request: the user named in
// "Authorization: Basic base64(name:)", else def.
func FromRequest(h http.Header, def string) (*User, error) {
	name := def
	if a := h.Get("Authorization"); a != "" {
		const p = "Basic "
		if !strings.HasPrefix(a, p) {
			return nil, fmt.Errorf("%w: unsupported authorization scheme", ErrUnknownUser)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, p))
		if err != nil {
			return nil, fmt.Errorf("%w: bad basic authorization", ErrUnknownUser)
		}
		n, _, _ := strings.Cut(string(raw), ":")
		if n != "" {
			name = n
		}
	}
	return Lookup(name)
}

// BasicAuth is the header value that names user as the acting user.
func BasicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// Resolve turns a client path into an absolute, cleaned sandbox path: "" is
// workdir (or the home directory), "~" and "~/x" expand to the home directory,
// relative paths are relative to the home directory.
func (u *User) Resolve(p, workdir string) string {
	switch {
	case p == "":
		if workdir != "" {
			return path.Clean(workdir)
		}
		return path.Clean(u.Home)
	case p == "~":
		return path.Clean(u.Home)
	case strings.HasPrefix(p, "~/"):
		return path.Join(u.Home, p[2:])
	case path.IsAbs(p):
		return path.Clean(p)
	default:
		return path.Join(u.Home, p)
	}
}

// AsFS runs fn with the calling thread's filesystem uid, gid and groups set to
// u's, so permission checks inside fn are the user's. Root (uid 0) runs fn
// unchanged, and so does an unprivileged agent acting as its own uid and gid
// (a test or development agent, which could not switch identities anyway).
// fn must not start goroutines that touch the filesystem on u's behalf: the
// identity belongs to this thread only.
func (u *User) AsFS(fn func() error) error {
	if u.UID == 0 {
		return fn()
	}
	if euid := os.Geteuid(); euid != 0 && uint32(euid) == u.UID && uint32(os.Getegid()) == u.GID {
		return fn()
	}
	runtime.LockOSThread()
	// setgroups/setfsgid/setfsuid through raw syscalls act on this thread only
	// (syscall.Setgroups would change every thread of the agent).
	if err := setThreadIdentity(u.UID, u.GID, u.Groups); err != nil {
		// The thread's identity may be half-changed: keep it locked so the
		// runtime discards it when this goroutine ends.
		return fmt.Errorf("switch to user %s: %w", u.Name, err)
	}
	err := fn()
	if rerr := setThreadIdentity(0, 0, nil); rerr != nil {
		return fmt.Errorf("restore agent identity: %w", rerr) // thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return err
}

func setThreadIdentity(uid, gid uint32, groups []uint32) error {
	var gp *uint32
	if len(groups) > 0 {
		gp = &groups[0]
	}
	if noFSUID() {
		return setThreadEffectiveIdentity(uid, gid, gp, len(groups))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptrOf(gp), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	// setfs*id return the previous value, never an error: read back to verify.
	if cur, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(cur) != uid {
		return fmt.Errorf("setfsuid %d: not permitted", uid)
	}
	if cur, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); uint32(cur) != gid {
		return fmt.Errorf("setfsgid %d: not permitted", gid)
	}
	return nil
}

// noFSUID reports whether the kernel lacks setfsuid: gVisor's sentry answers
// it with ENOSYS (the Linux kernel never fails it).
var noFSUID = sync.OnceValue(func() bool {
	_, _, e := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	return e == unix.ENOSYS
})

// setThreadEffectiveIdentity is setThreadIdentity where setfsuid does not
// exist (gVisor): the thread's effective uid and gid change instead, the
// real and saved ids stay root's, so the change can be undone. Raw
// setresuid/setresgid act on the calling thread only. Switching the effective
// uid from 0 to uid clears the thread's effective capabilities, as fsuid does
// for the filesystem ones, and switching back restores them from the
// permitted set; so the order is groups and gid first when leaving root, uid
// first when coming back.
func setThreadEffectiveIdentity(uid, gid uint32, gp *uint32, ngroups int) error {
	const keep = ^uintptr(0) // -1: leave unchanged
	if uid == 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			return fmt.Errorf("seteuid 0: %w", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(ngroups), uintptrOf(gp), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
		return fmt.Errorf("setegid %d: %w", gid, e)
	}
	if uid != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			return fmt.Errorf("seteuid %d: %w", uid, e)
		}
	}
	return nil
}
