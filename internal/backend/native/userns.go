package native

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Per-sandbox kernel accounting.
//
// The kernel charges a task's per-user counts (inotify instances and watches,
// pending signals, POSIX message queue bytes, processes, user namespaces...)
// to its uid in its own user namespace and then, level by level, to the
// *owner* of each user namespace in the parent namespace (kernel/ucount.c:
// inc_ucount and inc_rlimit_ucounts walk ns->ucounts). The owner is the
// effective uid of the task that created the namespace. Were wardend (root)
// to clone a sandbox's user namespace, every sandbox would be charged to host
// uid 0 together: one sandbox opening fs.inotify.max_user_instances inotify
// instances, or queueing RLIMIT_SIGPENDING signals, would leave none for any
// other sandbox and none for root's own services on the host.
//
// So the namespace is created by a thread whose effective uid is the first
// id of the sandbox's own host uid range, which nothing else on the host uses:
// the charges of all the sandbox's processes add up there, bounded by the
// host's per-user limits, and no other sandbox or host user shares them.

// secbitNoSetuidFixup keeps a thread's capabilities across a change of its
// effective uid away from 0 (linux/securebits.h: SECBIT_NO_SETUID_FIXUP).
const secbitNoSetuidFixup = 1 << 2

// startOwned starts cmd, whose SysProcAttr clones a new user namespace, so
// that the namespace is owned by host uid owner instead of wardend's uid 0.
//
// It runs cmd.Start on a locked OS thread whose effective uid is switched to
// owner for the duration (capabilities kept, so the same thread can still
// write the child's uid and gid maps, which map a whole range and need
// CAP_SETUID and CAP_SETGID in the host namespace), then switched back.
// Credentials are per thread in the kernel: only the raw syscalls below
// change them, never syscall.Setresuid, which Go applies to every thread of
// the process. The thread is never handed back to the Go scheduler: its
// goroutine ends while still locked, so the runtime terminates the thread
// (or, were it the main thread, parks it for good). Its credentials are
// restored first all the same, so even a parked main thread keeps uid 0.
//
// cmd must not set SysProcAttr.Pdeathsig: the child would be killed when this
// short-lived thread exits.
func startOwned(cmd *exec.Cmd, owner uint32) error {
	if owner == 0 {
		return errors.New("user namespace owner: refusing host uid 0")
	}
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Pdeathsig != 0 {
		return errors.New("user namespace owner: Pdeathsig would fire when the starting thread exits")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		errc <- startOwnedOnThread(cmd, owner)
	}()
	return <-errc
}

// startOwnedOnThread does startOwned's work on the locked thread.
func startOwnedOnThread(cmd *exec.Cmd, owner uint32) (err error) {
	euid, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("user namespace owner: read securebits: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits|secbitNoSetuidFixup), 0, 0, 0); err != nil {
		return fmt.Errorf("user namespace owner: keep capabilities (needs CAP_SETPCAP): %w", err)
	}
	// Put the thread back as it was: the effective uid first (the fixup is
	// still off, so the capabilities stay as they are), then the securebits.
	// Neither can fail for a root thread that kept its capabilities; if one
	// did, the thread still ends with its goroutine.
	const keep = ^uintptr(0)
	defer func() {
		unix.RawSyscall(unix.SYS_SETRESUID, keep, euid, keep)
		unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0)
	}()
	// setresuid(-1, owner, -1) on this thread only. The real and saved uids
	// stay 0: only the effective uid names the owner, and a real uid 0 keeps
	// the namespace's RLIMIT_NPROC ceiling as it was (not enforced for a
	// namespace root creates; the sandbox's pids cgroup bounds its tasks).
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(owner), keep); e != 0 {
		return fmt.Errorf("user namespace owner: set effective uid %d: %w", owner, e)
	}
	if got, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0); uint32(got) != owner {
		return fmt.Errorf("user namespace owner: effective uid is %d, want %d", got, owner)
	}
	return cmd.Start()
}
