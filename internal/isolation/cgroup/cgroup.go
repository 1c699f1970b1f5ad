// Package cgroup gives each Warden sandbox its own control group on the host.
//
// It is used by the host (supervisor) side of the native backend: the
// supervisor creates a group with the sandbox's limits before anything runs,
// writes the sandbox init's pid into it while the init is still blocked on its
// sync pipe, and destroys the group when the sandbox goes away. It is a thin
// wrapper over github.com/containerd/cgroups/v3 (packages cgroup1 and cgroup2)
// that adds what a sandbox runtime needs on top: strict name and limit
// validation, a bounded kill that works on cgroup v1, deletion that leaves
// nothing behind, and OOM / pids-limit accounting.
//
// # Layouts
//
// Available reports which layout is used:
//
//   - ModeV2 on a pure cgroup v2 ("unified") host. Groups live at
//     /sys/fs/cgroup/warden/<name>; the memory, cpu and pids controllers are
//     enabled in the subtree_control of the root and of /warden.
//   - ModeV1 on legacy hosts and on "hybrid" hosts (v1 controllers plus a
//     cgroup2 mount at /sys/fs/cgroup/unified that carries none of the
//     controllers we need; hugetlb there, as on the dev host, is fine).
//     Groups live at /warden/<name> in each of the memory, cpu, cpuacct, pids,
//     freezer and devices hierarchies.
//
// Groups are always created under the hierarchy root (/warden), never nested
// under the cgroup the daemon itself runs in. On v1, if the cgroup mounts seen
// by the daemon are rooted below the real hierarchy root (a daemon in a
// container), /warden is relative to that mount root.
//
// # Limits
//
// See Limits. A zero field means "no limit" for that resource. On v1 memory is
// limited with memory.limit_in_bytes and memory.memsw.limit_in_bytes set to
// the same value (so swap cannot extend the limit) and memory.swappiness 0; on
// v2 with memory.max and memory.swap.max 0. CPU uses a CFS quota over a 100ms
// period. Devices are always restricted to null, zero, full, random, urandom,
// tty, ptmx and pts: on v1 through the devices controller (deny "a" first, then
// an allowlist), on v2 through a BPF_CGROUP_DEVICE eBPF program that
// containerd/cgroups compiles from the same list and attaches to the group
// (Create fails if the program cannot be attached: this fails closed).
//
// # Killing
//
// On v2, Kill writes cgroup.kill (Linux 5.14+), which kills every process in
// the subtree atomically. On v1 (and v2 kernels without cgroup.kill) Kill runs
// rounds of: freeze the group, SIGKILL every pid in cgroup.procs, thaw, wait
// briefly; until the group is empty or a deadline passes. Freezing first means
// no process can fork or exit while its pid is being signalled, so a pid
// cannot be recycled under us and no child escapes the round.
//
// Exited but unreaped processes (zombies) are not listed in cgroup.procs and
// do not block rmdir, so Kill and Delete do not wait for the supervisor to
// reap its child.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"sync"
	"time"
)

// Mode is the cgroup layout this package drives.
type Mode int

const (
	// ModeNone means no usable cgroup layout was found.
	ModeNone Mode = iota
	// ModeV1 drives the per-controller v1 hierarchies (legacy and hybrid hosts).
	ModeV1
	// ModeV2 drives the unified v2 hierarchy at /sys/fs/cgroup.
	ModeV2
)

func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "cgroup v1"
	case ModeV2:
		return "cgroup v2"
	default:
		return "none"
	}
}

// Parent is the directory, relative to each hierarchy root, under which every
// sandbox group is created.
const Parent = "/warden"

// Errors returned (wrapped) by this package.
var (
	// ErrNotExist: the group does not exist (Load of a missing group, or any
	// operation after Delete).
	ErrNotExist = errors.New("cgroup does not exist")
	// ErrExist: Create found a group of that name already present.
	ErrExist = errors.New("cgroup already exists")
	// ErrInvalid: a name, limit or pid failed validation.
	ErrInvalid = errors.New("invalid argument")
)

// Bounds used to validate Limits.
const (
	// CFSPeriodMicros is the CFS period used for the CPU quota (100ms)
	// unless Limits.CPUPeriodMicros says otherwise.
	CFSPeriodMicros = 100_000
	// MinCPUPeriodMicros and MaxCPUPeriodMicros bound Limits.CPUPeriodMicros
	// (the kernel's bounds for cpu.cfs_period_us).
	MinCPUPeriodMicros = 1_000
	MaxCPUPeriodMicros = 1_000_000
	// MinCPUMillis is the smallest CPU limit: 1ms of CPU per 100ms period, the
	// kernel's minimum CFS quota.
	MinCPUMillis = 10
	// MaxCPUMillis is the largest CPU limit accepted (1024 cores).
	MaxCPUMillis = 1024 * 1000
	// MinMemoryBytes is the smallest memory limit accepted (4 MiB).
	MinMemoryBytes = 4 << 20
	// MaxMemoryBytes is the largest memory limit accepted (1 PiB).
	MaxMemoryBytes = 1 << 50
	// MaxPids is the largest pids limit accepted (the kernel's PID_MAX_LIMIT).
	MaxPids = 4 << 20
)

// Limits are the resource limits of one sandbox. A zero field means
// "unlimited" for that resource; negative values are rejected.
type Limits struct {
	// CPUMillis is the CPU bandwidth in thousandths of a core: 1000 is one
	// full core, 500 half a core, 2000 two cores (CFS quota over a 100ms
	// period).
	CPUMillis int64
	// MemoryBytes caps RAM plus swap. The kernel rounds it down to a whole
	// page.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads) in the group.
	Pids int64
	// CPUPeriodMicros is the CFS period the CPU quota is spread over; 0
	// means CFSPeriodMicros. A longer period makes throttling coarser (a
	// busy group runs for longer stretches, then waits longer); the gvisor
	// backend uses one so that gVisor's sampled CPU clocks stay close to
	// the CPU time the group really gets.
	CPUPeriodMicros int64
}

// Validate reports whether l is within the accepted bounds.
func (l Limits) Validate() error {
	if l.CPUMillis < 0 || (l.CPUMillis != 0 && (l.CPUMillis < MinCPUMillis || l.CPUMillis > MaxCPUMillis)) {
		return fmt.Errorf("%w: cpu limit %d millicores outside [%d, %d] (0 = unlimited)", ErrInvalid, l.CPUMillis, MinCPUMillis, MaxCPUMillis)
	}
	if l.MemoryBytes < 0 || (l.MemoryBytes != 0 && (l.MemoryBytes < MinMemoryBytes || l.MemoryBytes > MaxMemoryBytes)) {
		return fmt.Errorf("%w: memory limit %d bytes outside [%d, %d] (0 = unlimited)", ErrInvalid, l.MemoryBytes, int64(MinMemoryBytes), int64(MaxMemoryBytes))
	}
	if l.Pids < 0 || l.Pids > MaxPids {
		return fmt.Errorf("%w: pids limit %d outside [1, %d] (0 = unlimited)", ErrInvalid, l.Pids, MaxPids)
	}
	if l.CPUPeriodMicros != 0 && (l.CPUPeriodMicros < MinCPUPeriodMicros || l.CPUPeriodMicros > MaxCPUPeriodMicros) {
		return fmt.Errorf("%w: cpu period %d us outside [%d, %d] (0 = default)", ErrInvalid, l.CPUPeriodMicros, MinCPUPeriodMicros, MaxCPUPeriodMicros)
	}
	return nil
}

// period is the CFS period of l in microseconds.
func (l Limits) period() int64 {
	if l.CPUPeriodMicros > 0 {
		return l.CPUPeriodMicros
	}
	return CFSPeriodMicros
}

// cfsQuota returns the CFS quota in microseconds for l.CPUMillis.
func (l Limits) cfsQuota() int64 {
	return l.CPUMillis * l.period() / 1000
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidName reports whether name is usable as a group name: 1 to 63
// characters from [a-z0-9-], not starting with '-'.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: cgroup name %q must be 1-63 characters of [a-z0-9-] and not start with '-'", ErrInvalid, name)
	}
	return nil
}

// Stats is a snapshot of a group's accounting.
type Stats struct {
	// CPUNanos is the CPU time consumed (v1 cpuacct.usage, v2 cpu.stat
	// usage_usec).
	CPUNanos uint64
	// MemoryBytes is the current memory charge, page cache included (v1
	// memory.usage_in_bytes, v2 memory.current).
	MemoryBytes uint64
	// MemoryPeak is the high-water mark of MemoryBytes (v1
	// memory.max_usage_in_bytes, v2 memory.peak; 0 where the kernel lacks it).
	MemoryPeak uint64
	// MemoryLimitHits counts how often a charge hit the memory limit (v1
	// memory.failcnt plus memory.memsw.failcnt, v2 memory.events "max").
	// Reclaim often satisfies the allocation, so this is not an OOM count.
	// Best effort on v1: with memsw limited the charge fails on memsw first,
	// and recent kernels (6.x) keep no memsw failcnt, so it can stay 0.
	MemoryLimitHits uint64
	// OOMEvents counts processes killed by the OOM killer inside the group
	// (v1 memory.oom_control "oom_kill", v2 memory.events "oom_kill").
	OOMEvents uint64
	// Pids is the number of tasks in the group (pids.current).
	Pids uint64
	// PidsLimitHits counts forks refused because of the pids limit
	// (pids.events "max").
	PidsLimitHits uint64
}

// Timeouts for freezing and killing.
const (
	freezeTimeout = 5 * time.Second
	killTimeout   = 10 * time.Second
	rmdirTimeout  = 5 * time.Second
)

// impl is one layout's implementation of a group.
type impl interface {
	exists() bool
	addProc(pid int) error
	procs() ([]int, error)
	stats() (Stats, error)
	setFrozen(frozen bool, timeout time.Duration) error
	frozen() (bool, error)
	kill() error
	remove() error
	watchOOM() (oomWatcher, error)
	memoryUsageFile() string
}

// oomWatcher is a source of OOM wake-ups. wait blocks until the next one and
// reports false once the watcher was closed or the group is gone.
type oomWatcher interface {
	wait() bool
	close() error
}

// Group is one sandbox's cgroup. Its methods are safe for concurrent use.
type Group struct {
	name  string
	mode  Mode
	notes []string

	mu       sync.RWMutex
	impl     impl
	deleted  bool
	watchers map[oomWatcher]struct{}
	wg       sync.WaitGroup
}

// Available reports which cgroup layout this host offers, or why none is
// usable (not mounted, missing controllers, read-only, controllers split
// between v1 and v2).
func Available() (Mode, error) {
	m, _, err := detect()
	return m, err
}

// Create creates the group name with limits l and returns it. It fails with
// ErrExist if a group of that name is already present in any controller. On
// failure nothing is left behind.
func Create(name string, l Limits) (*Group, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("cgroup create: %w", err)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("cgroup create %q: %w", name, err)
	}
	mode, layout, err := detect()
	if err != nil {
		return nil, fmt.Errorf("cgroup create %q: %w", name, err)
	}
	g := &Group{name: name, mode: mode}
	switch mode {
	case ModeV1:
		g.impl, g.notes, err = createV1(layout.(*v1Layout), name, l)
	case ModeV2:
		g.impl, g.notes, err = createV2(unifiedRoot, name, l, true)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup create %q: %w", name, err)
	}
	return g, nil
}

// Load re-attaches to an existing group, e.g. after a daemon restart. It
// returns ErrNotExist if the group is in no controller. A group that is only
// partly present (a crash during Create or Delete) still loads, so that it can
// be deleted.
func Load(name string) (*Group, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("cgroup load: %w", err)
	}
	mode, layout, err := detect()
	if err != nil {
		return nil, fmt.Errorf("cgroup load %q: %w", name, err)
	}
	g := &Group{name: name, mode: mode}
	switch mode {
	case ModeV1:
		g.impl, err = loadV1(layout.(*v1Layout), name)
	case ModeV2:
		g.impl, err = loadV2(unifiedRoot, name)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup load %q: %w", name, err)
	}
	return g, nil
}

// List returns the names of the sandbox groups present on the host (in any
// controller), sorted. The daemon uses it after a restart to find groups it
// no longer knows about.
func List() ([]string, error) {
	mode, layout, err := detect()
	if err != nil {
		return nil, fmt.Errorf("cgroup list: %w", err)
	}
	var dirs []string
	switch mode {
	case ModeV1:
		for _, c := range v1Controllers {
			dirs = append(dirs, layout.(*v1Layout).dir(c, ""))
		}
	case ModeV2:
		dirs = []string{v2Dir(unifiedRoot, "")}
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("cgroup list: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && nameRE.MatchString(e.Name()) {
				seen[e.Name()] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Mode returns the layout the group lives in.
func (g *Group) Mode() Mode { return g.mode }

// Notes returns remarks recorded while creating the group about limits that
// could not be applied exactly as asked (for example, no swap accounting). An
// empty result means every limit was applied.
func (g *Group) Notes() []string { return append([]string(nil), g.notes...) }

func (g *Group) live(op string) error {
	if g.deleted {
		return fmt.Errorf("cgroup %s %q: %w (deleted)", op, g.name, ErrNotExist)
	}
	return nil
}

// AddProc moves process pid (all its threads) into the group, in every
// controller. If it fails part-way the process may be in some controllers
// only; the caller should kill it.
func (g *Group) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup add %q: %w: pid %d", g.name, ErrInvalid, pid)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if err := g.live("add"); err != nil {
		return err
	}
	if err := g.impl.addProc(pid); err != nil {
		return fmt.Errorf("cgroup add %q pid %d: %w", g.name, pid, err)
	}
	return nil
}

// Procs returns the pids in the group (including any child cgroups), sorted.
// On v1 it is the union over all controllers.
func (g *Group) Procs() ([]int, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if err := g.live("procs"); err != nil {
		return nil, err
	}
	p, err := g.impl.procs()
	if err != nil {
		return nil, fmt.Errorf("cgroup procs %q: %w", g.name, err)
	}
	return p, nil
}

// Stats returns the group's current accounting.
func (g *Group) Stats() (Stats, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if err := g.live("stats"); err != nil {
		return Stats{}, err
	}
	s, err := g.impl.stats()
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup stats %q: %w", g.name, err)
	}
	return s, nil
}

// MemoryUsageFile returns the file that holds the group's current memory
// charge: memory.usage_in_bytes on v1, memory.current on v2. On v1, usage
// thresholds can be registered in cgroup.event_control next to it.
func (g *Group) MemoryUsageFile() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.impl.memoryUsageFile()
}

// Freeze stops every process in the group and returns once they are all
// frozen. If that does not happen within a few seconds the group is thawed
// again and an error returned.
func (g *Group) Freeze() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.live("freeze"); err != nil {
		return err
	}
	if err := g.impl.setFrozen(true, freezeTimeout); err != nil {
		thawErr := g.impl.setFrozen(false, freezeTimeout)
		return fmt.Errorf("cgroup freeze %q: %w", g.name, errors.Join(err, thawErr))
	}
	return nil
}

// Thaw resumes a frozen group.
func (g *Group) Thaw() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.live("thaw"); err != nil {
		return err
	}
	if err := g.impl.setFrozen(false, freezeTimeout); err != nil {
		return fmt.Errorf("cgroup thaw %q: %w", g.name, err)
	}
	return nil
}

// Frozen reports whether the group is (fully) frozen.
func (g *Group) Frozen() (bool, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if err := g.live("state"); err != nil {
		return false, err
	}
	f, err := g.impl.frozen()
	if err != nil {
		return false, fmt.Errorf("cgroup state %q: %w", g.name, err)
	}
	return f, nil
}

// Kill SIGKILLs every process in the group and returns once the group is
// empty (see the package documentation for the algorithm). The group is left
// thawed. It returns an error if processes remain after about ten seconds.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.live("kill"); err != nil {
		return err
	}
	if err := g.impl.kill(); err != nil {
		return fmt.Errorf("cgroup kill %q: %w", g.name, err)
	}
	return nil
}

// Delete kills whatever still runs in the group, then removes it from every
// controller. It is idempotent: deleting a deleted or vanished group returns
// nil. After it returns nil no directory of the group is left. OOM channels
// from OOMEvents are closed.
func (g *Group) Delete() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopWatchers()
	if g.deleted {
		return nil
	}
	if !g.impl.exists() {
		g.deleted = true
		return nil
	}
	pids, err := g.impl.procs()
	if err != nil {
		return fmt.Errorf("cgroup delete %q: %w", g.name, err)
	}
	if len(pids) > 0 {
		if err := g.impl.kill(); err != nil {
			return fmt.Errorf("cgroup delete %q: %w", g.name, err)
		}
	}
	if err := g.impl.remove(); err != nil {
		return fmt.Errorf("cgroup delete %q: %w", g.name, err)
	}
	g.deleted = true
	return nil
}

// OOMEvents returns a channel that receives a value when the OOM killer acts
// in the group (v1: an eventfd registered on memory.oom_control, which fires
// when the group hits OOM; v2: inotify on memory.events, filtered to increases
// of oom_kill). Events that arrive while the previous one is still unread are
// merged; use Stats().OOMEvents for exact counts. The channel is closed by
// Delete, or when the group disappears.
func (g *Group) OOMEvents() (<-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.live("oom events"); err != nil {
		return nil, err
	}
	w, err := g.impl.watchOOM()
	if err != nil {
		return nil, fmt.Errorf("cgroup oom events %q: %w", g.name, err)
	}
	if g.watchers == nil {
		g.watchers = map[oomWatcher]struct{}{}
	}
	g.watchers[w] = struct{}{}
	ch := make(chan struct{}, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer close(ch)
		defer w.close()
		for w.wait() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, nil
}

// stopWatchers closes every OOM watcher and waits for their goroutines.
// Called with g.mu held.
func (g *Group) stopWatchers() {
	for w := range g.watchers {
		_ = w.close()
		delete(g.watchers, w)
	}
	g.wg.Wait()
}
