//go:build linux

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Apply loads the embedded policy, sets no_new_privs and installs the filter
// on every thread of the calling process (SECCOMP_FILTER_FLAG_TSYNC).
// Processes forked and exec'd afterwards inherit both. Call it last, after
// mounts, Landlock and capability changes: the caller itself can no longer
// mount, unshare, setns or ptrace afterwards.
func Apply() error {
	p, err := Load()
	if err != nil {
		return err
	}
	return p.Install()
}

// Install sets no_new_privs and installs the policy's filter with
// SECCOMP_FILTER_FLAG_TSYNC. With TSYNC the kernel also sets no_new_privs on
// every thread it synchronizes, so the whole process ends up with both.
func (p *Policy) Install() error {
	raw, err := p.Assemble()
	if err != nil {
		return err
	}
	return InstallProgram(raw)
}

// InstallProgram is Install for a program assembled earlier (wardend
// assembles the policy once and hands the program to every sandbox's init).
func InstallProgram(raw []bpf.RawInstruction) error {
	if len(raw) == 0 || len(raw) > 4096 {
		return fmt.Errorf("seccomp: program of %d instructions", len(raw))
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}

	// Both calls must come from the same thread: no_new_privs is per thread
	// until TSYNC copies it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch {
	case errno == unix.ENOSYS:
		return fmt.Errorf("seccomp: kernel lacks seccomp: %w", errors.Join(errors.ErrUnsupported, errno))
	case errno != 0:
		return fmt.Errorf("seccomp: install filter: %w", errno)
	case r != 0:
		// With TSYNC, a positive return is the id of a thread that could not
		// be synchronized; nothing was installed.
		return fmt.Errorf("seccomp: install filter: thread %d could not be synchronized (it has a diverging filter)", r)
	}
	return nil
}
