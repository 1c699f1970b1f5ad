//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errnoOf extracts the errno of err.
func errnoOf(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e, true
	}
	return 0, false
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// describe says what happened: "succeeded", an errno name or the error.
func describe(err error) string {
	if err == nil {
		return "succeeded"
	}
	if e, ok := errnoOf(err); ok {
		return errnoName(e)
	}
	return err.Error()
}

func names(want []syscall.Errno) string {
	s := make([]string, len(want))
	for i, e := range want {
		s[i] = errnoName(e)
	}
	return strings.Join(s, "/")
}

// isOneOf reports whether err carries one of the errnos.
func isOneOf(err error, want ...syscall.Errno) bool {
	e, ok := errnoOf(err)
	if !ok {
		return false
	}
	for _, w := range want {
		if e == w {
			return true
		}
	}
	return false
}

// expect reports a check that passes when err carries one of want.
func (r *reporter) expect(id int, name string, err error, want ...syscall.Errno) {
	if isOneOf(err, want...) {
		r.pass(id, name, describe(err))
		return
	}
	r.fail(id, name, fmt.Sprintf("%s, expected %s", describe(err), names(want)))
}

// expectErrno is expect for a raw syscall's errno (0 meaning success).
func (r *reporter) expectErrno(id int, name string, e syscall.Errno, want ...syscall.Errno) {
	var err error
	if e != 0 {
		err = e
	}
	r.expect(id, name, err, want...)
}

// rawErr runs a raw syscall and returns its errno (0 on success).
func rawErr(trap uintptr, a ...uintptr) syscall.Errno {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	return e
}

// readStatus returns the fields of /proc/<pid>/status ("self" for this process).
func readStatus(pid string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

func isRoot() bool { return os.Geteuid() == 0 }

func who() string {
	if isRoot() {
		return "root"
	}
	return "user"
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
