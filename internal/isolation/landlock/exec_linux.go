//go:build linux

package landlock

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ExecRestricted enforces the ruleset of Restrict, plus the abstract unix
// socket and signal scopes (ABI 6+), on the calling OS thread only, sets
// no_new_privs on it, and replaces the process image with path (execve(2)).
// The other threads die at execve, so the new program runs in exactly one
// Landlock domain, inherited by all its threads and children. It returns only
// on failure; if the failure comes after enforcement, the calling goroutine is
// left locked to its restricted thread and the process should exit.
func ExecRestricted(rootfs, path string, argv, env []string) error {
	if _, err := check(rootfs); err != nil {
		return err
	}
	cfg := landlock.Config{HandledAccessFS: allFS, Scoped: scopes}.BestEffort()
	fd, flags, err := cfg.NewRulesetFD(rules(rootfs)...)
	if err != nil {
		return fmt.Errorf("landlock: create ruleset: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("landlock: nothing to enforce: %w", ErrUnavailable)
	}
	defer unix.Close(fd) // close-on-exec as well

	runtime.LockOSThread() // never unlocked: this thread carries the domain into execve
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock: restrict thread: %w", err)
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("landlock: exec %s: %w", path, err)
	}
	return nil
}

// RestrictThread enforces the ruleset of Restrict, plus the abstract unix
// socket and signal scopes (ABI 6+), on the calling OS thread only, and sets
// no_new_privs on it. The caller must hold runtime.LockOSThread for the rest
// of the thread's life: processes forked from this thread inherit exactly one
// domain. Warden's agent forks every user process from one such thread, so
// the agent's own threads stay outside the domain (children cannot signal or
// reach them) while all children share one domain.
func RestrictThread(rootfs string) error {
	if _, err := check(rootfs); err != nil {
		return err
	}
	cfg := landlock.Config{HandledAccessFS: allFS, Scoped: scopes}.BestEffort()
	fd, flags, err := cfg.NewRulesetFD(rules(rootfs)...)
	if err != nil {
		return fmt.Errorf("landlock: create ruleset: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("landlock: nothing to enforce: %w", ErrUnavailable)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock: restrict thread: %w", err)
	}
	return nil
}
