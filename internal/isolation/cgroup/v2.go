package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// v2Group is a group in the unified hierarchy.
type v2Group struct {
	dir string
	m   *cgroup2.Manager
}

// v2Dir is the directory of group name under the v2 mount root; name ""
// gives the /warden parent.
func v2Dir(root, name string) string {
	return filepath.Join(root, Parent, name)
}

// enableV2Parent creates /warden and enables the sandbox controllers in the
// subtree_control of the root and of /warden.
func enableV2Parent(root string) error {
	if err := os.MkdirAll(v2Dir(root, ""), 0o755); err != nil {
		return err
	}
	for _, d := range []string{root, v2Dir(root, "")} {
		cur, err := readTrim(filepath.Join(d, "cgroup.subtree_control"))
		if err != nil {
			return err
		}
		have := strings.Fields(cur)
		var add []string
		for _, c := range v2Controllers {
			if !slices.Contains(have, c) {
				add = append(add, "+"+c)
			}
		}
		if len(add) == 0 {
			continue
		}
		if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), strings.Join(add, " ")); err != nil {
			return fmt.Errorf("enable controllers %v in %s: %w", add, d, err)
		}
	}
	return nil
}

// createV2 creates group name under the v2 mount root. Production always
// passes controllers=true; false (tests only) skips the memory, cpu and pids
// controllers so that the controller-independent parts (procs, freeze, kill,
// eBPF devices, removal) can run on a cgroup2 mount without controllers.
func createV2(root, name string, lim Limits, controllers bool) (impl, []string, error) {
	if controllers {
		if err := enableV2Parent(root); err != nil {
			return nil, nil, err
		}
	} else if err := os.MkdirAll(v2Dir(root, ""), 0o755); err != nil {
		return nil, nil, err
	}
	g := &v2Group{dir: v2Dir(root, name)}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, nil, fmt.Errorf("%w: %s", ErrExist, g.dir)
		}
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = g.remove()
		}
	}()

	var notes []string
	res := &cgroup2.Resources{
		Memory:  &cgroup2.Memory{},
		Pids:    &cgroup2.Pids{Max: -1},
		Devices: deviceRules(),
	}
	if _, err := os.Stat(filepath.Join(v2Dir(root, ""), "memory.swap.max")); err == nil {
		zero := int64(0)
		res.Memory.Swap = &zero
	} else {
		notes = append(notes, "memory.swap.max absent (no swap accounting): swap is not limited")
	}
	if lim.MemoryBytes > 0 {
		res.Memory.Max = &lim.MemoryBytes
	}
	period := uint64(lim.period())
	var quota *int64
	if lim.CPUMillis > 0 {
		q := lim.cfsQuota()
		quota = &q
	}
	res.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(quota, &period)}
	if lim.Pids > 0 {
		res.Pids.Max = lim.Pids
	}
	// NewManager writes the limits and compiles deviceRules into a
	// BPF_CGROUP_DEVICE program attached to the group; an attach failure is
	// an error (fail closed).
	if !controllers {
		res = &cgroup2.Resources{Devices: res.Devices}
		notes = nil
	}
	m, err := cgroup2.NewManager(root, filepath.Join(Parent, name), res)
	if err != nil {
		return nil, nil, err
	}
	g.m = m
	ok = true
	return g, notes, nil
}

func loadV2(root, name string) (impl, error) {
	g := &v2Group{dir: v2Dir(root, name)}
	if _, err := os.Lstat(g.dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNotExist
		}
		return nil, err
	}
	m, err := cgroup2.Load(filepath.Join(Parent, name), cgroup2.WithMountpoint(root))
	if err != nil {
		return nil, err
	}
	g.m = m
	return g, nil
}

func (g *v2Group) exists() bool {
	_, err := os.Lstat(g.dir)
	return err == nil
}

func (g *v2Group) addProc(pid int) error {
	return g.m.AddProc(uint64(pid))
}

func (g *v2Group) procs() ([]int, error) {
	set := map[int]struct{}{}
	if err := treePids(g.dir, set); err != nil {
		return nil, err
	}
	return sortedPids(set), nil
}

func (g *v2Group) stats() (Stats, error) {
	var s Stats
	cpu, err := readKV(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	s.CPUNanos = cpu["usage_usec"] * 1000
	if s.MemoryBytes, err = readUint(filepath.Join(g.dir, "memory.current")); err != nil {
		return s, err
	}
	// memory.peak exists since Linux 5.19.
	if s.MemoryPeak, err = readUint(filepath.Join(g.dir, "memory.peak")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	ev, err := readKV(filepath.Join(g.dir, "memory.events"))
	if err != nil {
		return s, err
	}
	s.MemoryLimitHits = ev["max"]
	s.OOMEvents = ev["oom_kill"]
	if s.Pids, err = readUint(filepath.Join(g.dir, "pids.current")); err != nil {
		return s, err
	}
	pev, err := readKV(filepath.Join(g.dir, "pids.events"))
	if err != nil {
		return s, err
	}
	s.PidsLimitHits = pev["max"]
	return s, nil
}

func (g *v2Group) frozen() (bool, error) {
	ev, err := readKV(filepath.Join(g.dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return ev["frozen"] == 1, nil
}

// setFrozen writes cgroup.freeze and waits (bounded) for cgroup.events to
// report the new state.
func (g *v2Group) setFrozen(frozen bool, timeout time.Duration) error {
	v := "0"
	if frozen {
		v = "1"
	}
	if err := writeFile(filepath.Join(g.dir, "cgroup.freeze"), v); err != nil {
		return err
	}
	err := pollUntil(timeout, func() (bool, error) {
		f, err := g.frozen()
		return f == frozen, err
	})
	if errors.Is(err, errTimeout) {
		return fmt.Errorf("cgroup.events frozen did not become %s within %v", v, timeout)
	}
	return err
}

func (g *v2Group) kill() error {
	err := writeFile(filepath.Join(g.dir, "cgroup.kill"), "1")
	if errors.Is(err, os.ErrNotExist) {
		// Linux < 5.14: no cgroup.kill.
		return killLoop(g.procs, g.setFrozen)
	}
	if err != nil {
		return err
	}
	err = pollUntil(killTimeout, func() (bool, error) {
		p, err := g.procs()
		return len(p) == 0, err
	})
	if errors.Is(err, errTimeout) {
		p, _ := g.procs()
		return fmt.Errorf("%d processes still present %v after cgroup.kill: %v", len(p), killTimeout, p)
	}
	return err
}

func (g *v2Group) remove() error {
	return removeTree(g.dir, time.Now().Add(rmdirTimeout))
}

// v2OOM waits on inotify IN_MODIFY of memory.events and reports increases
// of oom_kill.
type v2OOM struct {
	f    *os.File
	dir  string
	last uint64
}

func (g *v2Group) memoryUsageFile() string { return filepath.Join(g.dir, "memory.current") }

func (g *v2Group) watchOOM() (oomWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(g.dir, "memory.events"), unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &v2OOM{f: os.NewFile(uintptr(fd), "oom-inotify"), dir: g.dir}
	ev, err := readKV(filepath.Join(g.dir, "memory.events"))
	if err != nil {
		w.f.Close()
		return nil, err
	}
	w.last = ev["oom_kill"]
	return w, nil
}

func (w *v2OOM) wait() bool {
	buf := make([]byte, 16*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return false
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_IGNORED != 0 {
				return false // the watch went away with the group
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		m, err := readKV(filepath.Join(w.dir, "memory.events"))
		if err != nil {
			return false
		}
		if m["oom_kill"] > w.last {
			w.last = m["oom_kill"]
			return true
		}
	}
}

func (w *v2OOM) close() error { return w.f.Close() }
