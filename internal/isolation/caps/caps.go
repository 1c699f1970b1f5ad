// Package caps narrows the capability sets of the in-sandbox init
// (warden-agent) for everything it will exec, and reads the capability and
// seccomp state that the probes check.
//
// DropBounding empties the bounding set and ClearInheritableAmbient empties
// the inheritable and ambient sets, on every thread of the process: the agent
// is a multi-threaded Go program that forks user processes from whatever
// thread is running, so a per-thread change would leak. Both use
// kernel.org/.../libcap/psx, which is syscall.AllThreadsSyscall in the
// agent's CGO_ENABLED=0 build (AllThreadsSyscall itself refuses to run when
// cgo is linked; psx then uses libpsx, so cgo test binaries work too).
//
// The agent keeps its own effective and permitted sets, which it needs to
// switch users when it forks. With the bounding, inheritable and ambient sets
// empty, an exec'd program, root or not, starts with no capabilities.
package caps

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Status is the capability and seccomp state of a task, from
// /proc/<pid>/status.
type Status struct {
	Pid            int // the task's id (a thread id for /proc/self/task/N)
	Uid, Gid       [4]uint32
	CapInh         uint64
	CapPrm         uint64
	CapEff         uint64
	CapBnd         uint64
	CapAmb         uint64
	NoNewPrivs     bool
	Seccomp        int // 0 disabled, 1 strict, 2 filter
	SeccompFilters int
}

// Locked reports whether the status is what probe 7 requires of user code:
// CapInh, CapPrm, CapEff, CapBnd and CapAmb all zero, no_new_privs set and a
// seccomp filter installed.
func (s Status) Locked() bool {
	return s.CapInh == 0 && s.CapPrm == 0 && s.CapEff == 0 && s.CapBnd == 0 && s.CapAmb == 0 &&
		s.NoNewPrivs && s.Seccomp == 2
}

// Current reads /proc/self/status (the thread-group leader's view).
func Current() (Status, error) {
	return readStatus("/proc/self/status")
}

// Threads reads /proc/self/task/*/status: one Status per thread.
func Threads() ([]Status, error) {
	paths, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return nil, fmt.Errorf("caps: list threads: %w", err)
	}
	var out []Status
	for _, p := range paths {
		s, err := readStatus(p)
		if err != nil {
			if _, statErr := os.Stat(filepath.Dir(p)); statErr != nil {
				continue // the thread exited meanwhile
			}
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("caps: no threads found under /proc/self/task")
	}
	return out, nil
}

func readStatus(path string) (Status, error) {
	f, err := os.Open(path)
	if err != nil {
		return Status{}, fmt.Errorf("caps: %w", err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return Status{}, fmt.Errorf("caps: %s: %w", path, err)
	}
	return s, nil
}

// Parse reads the Pid, Uid, Gid, Cap*, NoNewPrivs and Seccomp lines of a
// /proc/<pid>/status file, e.g. one that an exec'd child printed.
func Parse(r io.Reader) (Status, error) {
	var s Status
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "Pid":
			s.Pid, err = strconv.Atoi(val)
		case "Uid":
			s.Uid, err = parseIDs(val)
		case "Gid":
			s.Gid, err = parseIDs(val)
		case "CapInh":
			s.CapInh, err = strconv.ParseUint(val, 16, 64)
		case "CapPrm":
			s.CapPrm, err = strconv.ParseUint(val, 16, 64)
		case "CapEff":
			s.CapEff, err = strconv.ParseUint(val, 16, 64)
		case "CapBnd":
			s.CapBnd, err = strconv.ParseUint(val, 16, 64)
		case "CapAmb":
			s.CapAmb, err = strconv.ParseUint(val, 16, 64)
		case "NoNewPrivs":
			s.NoNewPrivs = val == "1"
		case "Seccomp":
			s.Seccomp, err = strconv.Atoi(val)
		case "Seccomp_filters":
			s.SeccompFilters, err = strconv.Atoi(val)
		default:
			continue
		}
		if err != nil {
			return Status{}, fmt.Errorf("parse %s: %w", key, err)
		}
		seen[key] = true
	}
	if err := sc.Err(); err != nil {
		return Status{}, fmt.Errorf("read status: %w", err)
	}
	for _, key := range []string{"Pid", "Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"} {
		if !seen[key] {
			return Status{}, fmt.Errorf("status has no %s line", key)
		}
	}
	return s, nil
}

func parseIDs(val string) ([4]uint32, error) {
	var ids [4]uint32
	f := strings.Fields(val)
	if len(f) != 4 {
		return ids, fmt.Errorf("want 4 ids, got %q", val)
	}
	for i, s := range f {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return ids, err
		}
		ids[i] = uint32(n)
	}
	return ids, nil
}
