package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 hierarchies every sandbox group is created in.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer", "devices"}

// v2Controllers are the v2 controllers enabled for sandbox groups.
var v2Controllers = []string{"cpu", "memory", "pids"}

// unifiedRoot is the cgroup v2 mount point on a unified host.
const unifiedRoot = "/sys/fs/cgroup"

// detect picks the layout. For ModeV1 the second result is a *v1Layout.
func detect() (Mode, any, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		if err := checkV2(); err != nil {
			return ModeNone, nil, err
		}
		return ModeV2, nil, nil
	case cgroups.Legacy, cgroups.Hybrid:
		l, err := discoverV1("/proc/self/mountinfo")
		if err != nil {
			if cgroups.Mode() == cgroups.Hybrid {
				if ctrls, _ := readControllers(filepath.Join(unifiedRoot, "unified")); len(ctrls) > 0 {
					err = fmt.Errorf("%w (hybrid host with controllers %v on the v2 mount: split layouts are not supported)", err, ctrls)
				}
			}
			return ModeNone, nil, err
		}
		return ModeV1, l, nil
	default:
		return ModeNone, nil, errors.New("no cgroup filesystem mounted at /sys/fs/cgroup")
	}
}

func readControllers(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

func checkV2() error {
	ctrls, err := readControllers(unifiedRoot)
	if err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	for _, c := range v2Controllers {
		if !slices.Contains(ctrls, c) {
			return fmt.Errorf("cgroup v2: controller %q not available at %s (have %v)", c, unifiedRoot, ctrls)
		}
	}
	if err := unix.Access(unifiedRoot, unix.W_OK); err != nil {
		return fmt.Errorf("cgroup v2: %s not writable: %w", unifiedRoot, err)
	}
	return nil
}

// v1Layout locates the v1 hierarchies. containerd/cgroups addresses a
// controller as <root>/<controller>, so root is the common parent of the
// mounts and every <root>/<controller> must lead to that controller's mount
// (directly or through the usual cpu -> cpu,cpuacct symlinks).
type v1Layout struct {
	root   string
	mounts map[string]string
}

// dir is the absolute directory of group name in controller c; name ""
// gives the /warden parent.
func (l *v1Layout) dir(c, name string) string {
	return filepath.Join(l.root, c, Parent, name)
}

func discoverV1(mountinfo string) (*v1Layout, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	defer f.Close()
	mounts := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 || fields[sep+1] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(fields[sep+3], ",") {
			if slices.Contains(v1Controllers, opt) {
				if _, ok := mounts[opt]; !ok {
					mounts[opt] = fields[4]
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroup v1: read %s: %w", mountinfo, err)
	}
	for _, c := range v1Controllers {
		if _, ok := mounts[c]; !ok {
			return nil, fmt.Errorf("cgroup v1: controller %q is not mounted", c)
		}
	}
	l := &v1Layout{root: filepath.Dir(mounts["memory"]), mounts: mounts}
	for _, c := range v1Controllers {
		want, err := filepath.EvalSymlinks(mounts[c])
		if err != nil {
			return nil, fmt.Errorf("cgroup v1: controller %q: %w", c, err)
		}
		got, err := filepath.EvalSymlinks(filepath.Join(l.root, c))
		if err != nil || got != want {
			return nil, fmt.Errorf("cgroup v1: controller %q is mounted at %s, not reachable as %s", c, mounts[c], filepath.Join(l.root, c))
		}
		if err := unix.Access(mounts[c], unix.W_OK); err != nil {
			return nil, fmt.Errorf("cgroup v1: %s not writable: %w", mounts[c], err)
		}
	}
	return l, nil
}

// File helpers.

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// readUint reads a file holding one unsigned integer ("max" reads as 0).
func readUint(path string) (uint64, error) {
	s, err := readTrim(path)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readKV reads a flat-keyed file ("key value" per line).
func readKV(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		out[k] = n
	}
	return out, nil
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}

// readPids reads a cgroup.procs file; pids not visible in our pid namespace
// (0) are dropped.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		if p > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

// treePids collects the pids of dir and all cgroups below it into set.
// A missing dir contributes nothing.
func treePids(dir string, set map[int]struct{}) error {
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		pids, err := readPids(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, pid := range pids {
			set[pid] = struct{}{}
		}
		return nil
	})
	return err
}

func sortedPids(set map[int]struct{}) []int {
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// removeTree removes the cgroup dir and any child cgroups below it, deepest
// first. Missing directories are fine. EBUSY (tasks still exiting) is retried
// until the deadline.
func removeTree(dir string, deadline time.Time) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		delay := time.Millisecond
		for {
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("rmdir %s: %w", dirs[i], err)
			}
			time.Sleep(delay)
			delay = min(delay*2, 50*time.Millisecond)
		}
	}
	return nil
}

// pollUntil calls cond until it reports true, fails, or timeout passes.
func pollUntil(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	delay := 500 * time.Microsecond
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(delay)
		delay = min(delay*2, 20*time.Millisecond)
	}
}

var errTimeout = errors.New("timed out")

// signalAll SIGKILLs pids. A pid that is already gone is not an error. It
// refuses to signal the calling process.
func signalAll(pids []int) error {
	self := os.Getpid()
	for _, pid := range pids {
		if pid == self {
			return fmt.Errorf("refusing to kill pid %d: it is the calling process", pid)
		}
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill pid %d: %w", pid, err)
		}
	}
	return nil
}
