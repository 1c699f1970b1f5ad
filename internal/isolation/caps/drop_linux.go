//go:build linux

package caps

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// LastCap returns the highest capability number the kernel knows, from
// /proc/sys/kernel/cap_last_cap, or by probing PR_CAPBSET_READ when that file
// is unreadable (a masked /proc/sys).
func LastCap() (int, error) {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 || n > 63 {
			return 0, fmt.Errorf("caps: bad cap_last_cap %q", b)
		}
		return n, nil
	}
	for c := 0; c < 64; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				if c == 0 {
					return 0, fmt.Errorf("caps: PR_CAPBSET_READ rejects capability 0: %w", err)
				}
				return c - 1, nil
			}
			return 0, fmt.Errorf("caps: probe capability %d: %w", c, err)
		}
	}
	return 63, nil
}

// DropBounding removes every capability, 0 through LastCap, from the bounding
// set of every thread (PR_CAPBSET_DROP). It needs CAP_SETPCAP in the effective
// set, which it leaves there: only the bounding set shrinks.
func DropBounding() error {
	last, err := LastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if _, _, errno := psx.Syscall3(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); errno != 0 {
			return fmt.Errorf("caps: drop capability %d from the bounding set: %w", c, errno)
		}
	}
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			return fmt.Errorf("caps: read bounding set: %w", err)
		}
		if in != 0 {
			return fmt.Errorf("caps: capability %d still in the bounding set", c)
		}
	}
	return nil
}

// ClearInheritableAmbient empties the ambient set (PR_CAP_AMBIENT_CLEAR_ALL)
// and the inheritable set (capset, keeping effective and permitted) on every
// thread. All threads of a Go process share one set of credentials (the
// runtime changes them on all threads at once), so the calling thread's
// effective and permitted sets are written to every thread unchanged.
func ClearInheritableAmbient() error {
	if _, _, errno := psx.Syscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("caps: clear ambient set: %w", errno)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("caps: capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	_, _, errno := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&data)
	if errno != 0 {
		return fmt.Errorf("caps: clear inheritable set: %w", errno)
	}
	return nil
}

// DropThread empties the bounding, inheritable and ambient sets of the calling
// OS thread only (the caller holds runtime.LockOSThread). Processes forked from
// this thread and exec'd end up with no capabilities at all, even as uid 0,
// while the rest of the process keeps its own. It costs a few syscalls on one
// thread, where DropBounding stops every thread once per capability.
func DropThread() error { return DropThreadExcept(nil) }

// DropThreadExcept is DropThread keeping the capabilities in keep (numbers,
// see ByName) in the bounding set, so root processes exec'd from the thread
// hold exactly those (within their user namespace) and nobody else any.
func DropThreadExcept(keep []int) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("caps: clear ambient set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("caps: capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("caps: clear inheritable set: %w", err)
	}
	last, err := LastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("caps: drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
