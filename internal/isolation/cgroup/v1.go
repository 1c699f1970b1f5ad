package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// v1Group is a group in the v1 hierarchies.
type v1Group struct {
	layout *v1Layout
	name   string
	cg     cgroup1.Cgroup
}

// hierarchy is the containerd/cgroups subsystem list: exactly the
// controllers a sandbox needs, memory first.
func (l *v1Layout) hierarchy() ([]cgroup1.Subsystem, error) {
	return []cgroup1.Subsystem{
		cgroup1.NewMemory(l.root, cgroup1.OptionalSwap()),
		cgroup1.NewCpu(l.root),
		cgroup1.NewCpuacct(l.root),
		cgroup1.NewPids(l.root),
		cgroup1.NewFreezer(l.root),
		cgroup1.NewDevices(l.root),
	}, nil
}

// allowedDevices are the character devices a sandbox may use (rwm); minor -1
// is a wildcard.
var allowedDevices = []struct{ major, minor int64 }{
	{1, 3},    // null
	{1, 5},    // zero
	{1, 7},    // full
	{1, 8},    // random
	{1, 9},    // urandom
	{5, 0},    // tty
	{5, 2},    // ptmx
	{136, -1}, // pts
}

// deviceRules is deny-all followed by the allowlist, in the OCI form that
// both the v1 devices controller and the v2 eBPF filter accept.
func deviceRules() []specs.LinuxDeviceCgroup {
	ptr := func(v int64) *int64 { return &v }
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Type: "a", Major: ptr(-1), Minor: ptr(-1), Access: "rwm"}}
	for _, d := range allowedDevices {
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(d.major), Minor: ptr(d.minor), Access: "rwm"})
	}
	return rules
}

func (g *v1Group) dir(c string) string { return g.layout.dir(c, g.name) }

func (g *v1Group) path() cgroup1.Path {
	return cgroup1.StaticPath(filepath.Join(Parent, g.name))
}

func createV1(l *v1Layout, name string, lim Limits) (impl, []string, error) {
	g := &v1Group{layout: l, name: name}
	for _, c := range v1Controllers {
		if err := os.MkdirAll(l.dir(c, ""), 0o755); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range v1Controllers {
		if _, err := os.Lstat(g.dir(c)); err == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrExist, g.dir(c))
		}
	}
	// Reserve the name atomically: the memory directory is the lock.
	if err := os.Mkdir(g.dir("memory"), 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, nil, fmt.Errorf("%w: %s", ErrExist, g.dir("memory"))
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
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{}, Devices: deviceRules()}
	if lim.MemoryBytes > 0 {
		res.Memory.Limit = &lim.MemoryBytes
		// containerd/cgroups writes limit_in_bytes before memsw.limit_in_bytes,
		// which a fresh group (both unlimited) requires.
		if _, err := os.Stat(filepath.Join(l.dir("memory", ""), "memory.memsw.limit_in_bytes")); err == nil {
			res.Memory.Swap = &lim.MemoryBytes
		} else {
			notes = append(notes, "memory.memsw.limit_in_bytes absent (no swap accounting): only RAM is limited, swap is not")
		}
	}
	period := uint64(lim.period())
	res.CPU = &specs.LinuxCPU{Period: &period}
	if lim.CPUMillis > 0 {
		q := lim.cfsQuota()
		res.CPU.Quota = &q
	}
	if lim.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &lim.Pids}
	}
	cg, err := cgroup1.New(g.path(), res, cgroup1.WithHierarchy(l.hierarchy))
	if err != nil {
		return nil, nil, err
	}
	g.cg = cg
	// Best effort: the kernel refuses swappiness on some configurations; with
	// memsw limited it only changes reclaim behaviour, not the limit.
	if err := writeFile(filepath.Join(g.dir("memory"), "memory.swappiness"), "0"); err != nil {
		notes = append(notes, fmt.Sprintf("memory.swappiness not set to 0: %v", err))
	}
	ok = true
	return g, notes, nil
}

func loadV1(l *v1Layout, name string) (impl, error) {
	g := &v1Group{layout: l, name: name}
	cg, err := cgroup1.Load(g.path(), cgroup1.WithHierarchy(l.hierarchy))
	if err != nil {
		if errors.Is(err, cgroup1.ErrCgroupDeleted) {
			return nil, ErrNotExist
		}
		return nil, err
	}
	g.cg = cg
	return g, nil
}

func (g *v1Group) exists() bool {
	for _, c := range v1Controllers {
		if _, err := os.Lstat(g.dir(c)); err == nil {
			return true
		}
	}
	return false
}

func (g *v1Group) addProc(pid int) error {
	return g.cg.AddProc(uint64(pid))
}

func (g *v1Group) procs() ([]int, error) {
	set := map[int]struct{}{}
	for _, c := range v1Controllers {
		if err := treePids(g.dir(c), set); err != nil {
			return nil, err
		}
	}
	return sortedPids(set), nil
}

func (g *v1Group) stats() (Stats, error) {
	var s Stats
	var err error
	mem := g.dir("memory")
	if s.CPUNanos, err = readUint(filepath.Join(g.dir("cpuacct"), "cpuacct.usage")); err != nil {
		return s, err
	}
	if s.MemoryBytes, err = readUint(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	if s.MemoryPeak, err = readUint(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
		return s, err
	}
	if s.MemoryLimitHits, err = readUint(filepath.Join(mem, "memory.failcnt")); err != nil {
		return s, err
	}
	// With memsw limited, a charge usually fails on memsw (checked first) and
	// then memory.failcnt does not move; a charge fails on at most one of them.
	if n, err := readUint(filepath.Join(mem, "memory.memsw.failcnt")); err == nil {
		s.MemoryLimitHits += n
	} else if !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	oom, err := readKV(filepath.Join(mem, "memory.oom_control"))
	if err != nil {
		return s, err
	}
	s.OOMEvents = oom["oom_kill"]
	if s.Pids, err = readUint(filepath.Join(g.dir("pids"), "pids.current")); err != nil {
		return s, err
	}
	ev, err := readKV(filepath.Join(g.dir("pids"), "pids.events"))
	if err != nil {
		return s, err
	}
	s.PidsLimitHits = ev["max"]
	return s, nil
}

// freezer.state values.
const (
	v1Frozen = "FROZEN"
	v1Thawed = "THAWED"
)

func (g *v1Group) freezerState() (string, error) {
	return readTrim(filepath.Join(g.dir("freezer"), "freezer.state"))
}

// setFrozen writes freezer.state and waits (bounded, unlike containerd's
// Freeze) until the kernel reports the new state.
func (g *v1Group) setFrozen(frozen bool, timeout time.Duration) error {
	want := v1Thawed
	if frozen {
		want = v1Frozen
	}
	file := filepath.Join(g.dir("freezer"), "freezer.state")
	err := pollUntil(timeout, func() (bool, error) {
		if err := writeFile(file, want); err != nil {
			return false, err
		}
		st, err := g.freezerState()
		return st == want, err
	})
	if errors.Is(err, errTimeout) {
		st, _ := g.freezerState()
		return fmt.Errorf("freezer.state still %q after %v, want %q", st, timeout, want)
	}
	return err
}

func (g *v1Group) frozen() (bool, error) {
	st, err := g.freezerState()
	return st == v1Frozen, err
}

// kill: freeze, SIGKILL every pid, thaw, wait; repeat until empty.
func (g *v1Group) kill() error {
	return killLoop(g.procs, g.setFrozen)
}

// killLoop is the freeze/kill/thaw algorithm shared by v1 and v2 kernels
// without cgroup.kill.
func killLoop(procs func() ([]int, error), setFrozen func(bool, time.Duration) error) error {
	deadline := time.Now().Add(killTimeout)
	var freezeErr error
	for round := 1; ; round++ {
		pids, err := procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("%d processes still present after %d rounds: %v", len(pids), round-1, pids)
			if freezeErr != nil {
				err = fmt.Errorf("%w (last freeze: %w)", err, freezeErr)
			}
			return err
		}
		// A task stuck in an uninterruptible sleep can keep the group
		// FREEZING; kill what we see anyway and try again next round.
		freezeErr = setFrozen(true, time.Second)
		pids, err = procs()
		if err == nil {
			err = signalAll(pids)
		}
		// Thaw even if signalling failed: frozen tasks only die once thawed.
		thawErr := setFrozen(false, freezeTimeout)
		if errors.Is(thawErr, os.ErrNotExist) {
			thawErr = nil // partial group without a freezer directory
		}
		if err != nil || thawErr != nil {
			return errors.Join(err, thawErr)
		}
		_ = pollUntil(200*time.Millisecond, func() (bool, error) {
			p, err := procs()
			return len(p) == 0, err
		})
	}
}

func (g *v1Group) remove() error {
	deadline := time.Now().Add(rmdirTimeout)
	var errs []error
	for _, c := range v1Controllers {
		if err := removeTree(g.dir(c), deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// v1OOM waits on an eventfd registered on memory.oom_control.
type v1OOM struct {
	f   *os.File
	dir string
}

func (g *v1Group) memoryUsageFile() string {
	return filepath.Join(g.dir("memory"), "memory.usage_in_bytes")
}

func (g *v1Group) watchOOM() (oomWatcher, error) {
	fd, err := g.cg.RegisterMemoryEvent(cgroup1.OOMEvent())
	if err != nil {
		return nil, err
	}
	// Non-blocking so that the runtime poller serves Read and Close can
	// interrupt it.
	if err := unix.SetNonblock(int(fd), true); err != nil {
		unix.Close(int(fd))
		return nil, err
	}
	return &v1OOM{f: os.NewFile(fd, "oom-eventfd:"+strconv.Itoa(int(fd))), dir: g.dir("memory")}, nil
}

func (w *v1OOM) wait() bool {
	var buf [8]byte
	if _, err := w.f.Read(buf[:]); err != nil {
		return false
	}
	// The kernel also signals registered eventfds when the group is removed.
	_, err := os.Lstat(w.dir)
	return err == nil
}

func (w *v1OOM) close() error { return w.f.Close() }
