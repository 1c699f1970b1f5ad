// Package landlock applies Warden's Landlock ruleset to the in-sandbox init
// (warden-agent) and, through inheritance, to everything it forks.
//
// The ruleset handles every filesystem access right go-landlock knows and
// grants all of them beneath the sandbox root except make_char, make_block
// and ioctl_dev, so device nodes cannot be created anywhere; ioctl_dev is
// granted beneath <rootfs>/dev only. Abstract unix sockets and signals are
// scoped to the sandbox's Landlock domain where that can be done correctly
// (see below). Network access is not restricted yet.
//
// Restrict enforces the ruleset on every thread of the running process:
// below ABI 8 go-landlock calls landlock_restrict_self on each thread through
// kernel.org/.../libcap/psx (syscall.AllThreadsSyscall in a CGO_ENABLED=0
// build such as the agent's, libpsx when cgo is linked); from ABI 8 on it uses
// LANDLOCK_RESTRICT_SELF_TSYNC. It also sets no_new_privs on every thread.
//
// Per-thread enforcement gives every thread its own, sibling Landlock domain.
// That is harmless for the filesystem rules (every sibling has the same
// rules), but anything that compares domains breaks: with the scopes, a
// process forked from one thread could not be signalled from another thread
// of the agent, nor reach an abstract socket created under another thread;
// and Landlock's ptrace rules, which cannot be turned off, already refuse
// /proc/<pid>/exe, cwd and fd of a process forked from another thread.
// Restrict therefore adds the scopes only when the kernel has TSYNC (ABI 8+),
// where all threads share one domain. ExecRestricted enforces the full
// ruleset, scopes included (ABI 6+), on one thread and immediately execs, so
// the new program starts with exactly one domain; below ABI 8 it is the
// better choice for the agent, which can re-exec itself with it.
//
// The configuration is best effort (rights and scopes newer than the kernel
// are dropped) above a floor: both functions fail when Landlock is missing or
// its ABI is below MinABI, and the caller decides whether to fail closed.
package landlock

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// MinABI is the lowest Landlock ABI Restrict and ExecRestricted accept: ABI 5 brings
// ioctl_dev, without which device ioctls cannot be confined to /dev.
const MinABI = 5

// ErrUnavailable reports that the kernel's Landlock is missing, disabled or
// older than MinABI.
var ErrUnavailable = errors.New("landlock: unavailable")

// ABI returns the kernel's Landlock ABI version, or 0 when Landlock is not
// built in or not enabled.
func ABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Access-right sets used by Restrict.
var (
	// allFS is every filesystem right go-landlock knows.
	allFS = landlock.V11.HandledAccessFS
	// noDevices are the rights not granted beneath the root.
	noDevices = landlock.AccessFSSet(llsys.AccessFSMakeChar | llsys.AccessFSMakeBlock | llsys.AccessFSIoctlDev)
	// scopes are the IPC scopes restricted (ABI 6+; see TSyncABI).
	scopes = landlock.ScopedSet(llsys.ScopeAbstractUnixSocket | llsys.ScopeSignal)
)

// TSyncABI is the first Landlock ABI whose all-thread enforcement yields a
// single domain; below it Restrict leaves out the scopes.
const TSyncABI = 8

func check(rootfs string) (int, error) {
	abi := ABI()
	if abi < MinABI {
		if abi == 0 {
			return 0, fmt.Errorf("landlock: not supported by the kernel or not enabled: %w", ErrUnavailable)
		}
		return 0, fmt.Errorf("landlock: kernel ABI %d is below the required %d: %w", abi, MinABI, ErrUnavailable)
	}
	if !filepath.IsAbs(rootfs) {
		return 0, fmt.Errorf("landlock: rootfs %q is not absolute", rootfs)
	}
	return abi, nil
}

func rules(rootfs string) []landlock.Rule {
	return []landlock.Rule{
		landlock.PathAccess(allFS&^noDevices, rootfs),
		landlock.PathAccess(llsys.AccessFSIoctlDev, filepath.Join(rootfs, "dev")).IgnoreIfMissing(),
	}
}

// Restrict confines the calling process, all its threads and all its future
// children: every filesystem right beneath rootfs except creating character
// and block devices, and device ioctls only beneath rootfs/dev. On ABI 8+ it
// also scopes abstract unix sockets and signals to the domain. Paths outside
// rootfs get no rights, so the agent calls it with "/" after pivot_root. It
// returns an error wrapping ErrUnavailable when ABI() < MinABI; nothing is
// enforced then.
func Restrict(rootfs string) error {
	abi, err := check(rootfs)
	if err != nil {
		return err
	}
	cfg := landlock.Config{HandledAccessFS: allFS}
	if abi >= TSyncABI {
		cfg.Scoped = scopes
	}
	if err := cfg.BestEffort().Restrict(rules(rootfs)...); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}
