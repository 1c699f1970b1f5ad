// Package gvisor is Warden's gVisor backend: each sandbox is a gVisor
// sandbox (runsc, the systrap platform) whose
// kernel is gVisor's sentry, a user-space kernel that serves every system
// call of the sandbox's processes. Nothing in the sandbox talks to the host
// kernel directly. runsc is built by scripts/install-runsc.sh at a pinned
// version with Warden's fixes (scripts/runsc-patches); Preflight refuses a
// runsc without them.
//
// # Boot
//
// Create composes the template's "/" layers into a read-only host overlay
// (see rootfs.go), writes an OCI bundle and creates the sandbox's host
// cgroup; Start runs `runsc create` and `runsc start`. runsc puts gVisor's
// overlay over that root with a writable layer capped at the disk limit,
// kept in a host file (its filestore: --overlay2=root:dir=Dir/upper,size=...)
// on the sandbox's own ext4 image mounted at Dir/upper (Config.DiskDir), or
// in gVisor's memory where images cannot be made
// (--overlay2=root:memory,...), so the template on the host is never
// written. Deeper targets ("/usr", which the base template shares with
// the host) are bound in read-only and get their own gVisor overlay from the
// init, so the sandbox sees one overlay per target as in a native sandbox.
//
// PID 1 is the same static warden-agent binary as in native sandboxes, in its
// "gvisor-init" mode (package ginit): it mounts the deeper targets' overlays,
// gives the sandbox an empty /sys, a minimal /dev, size-limited /tmp and
// /dev/shm and a read-only /proc/sys, joins gVisor's own pids cgroup, starts
// listening, hides /.warden (the backend's directory in the root), locks its
// children down (empty capability bounding set, no_new_privs, Warden's
// seccomp filter, enforced by gVisor's kernel; gVisor has no Landlock) and
// serves the agent protocol.
//
// # Reaching the agent
//
// runsc --host-uds=create lets a bind(2) inside the sandbox create a unix
// socket on the host, in a host directory bind-mounted into the sandbox at
// /.warden/run. The agent binds its socket there and wardend connects to
// <run dir>/<id>/control/agent.sock. Once listening, the agent unmounts
// /.warden/run and mounts an empty read-only tmpfs over /.warden: the
// listener keeps working through its descriptor, and no path in the sandbox
// leads to the socket any more (writes through the root would land in
// gVisor's overlay anyway, never on the host). --host-uds=open (connecting
// to host sockets) stays off, so no host socket is reachable from inside.
// The same directory carries the memory watchdog's OOM counter, written
// through a descriptor the agent opened before hiding it.
//
// # Limits
//
//   - CPU: the host cgroup's CFS quota, which the sentry, gofer and
//     systrap's stubs all run under; runsc sizes the sandbox's CPU count
//     from it. The quota's period is Config.CPUPeriod (500ms, not the usual
//     100ms): gVisor samples CPU time every 10ms tick and charges a whole
//     tick to each running task, so under short throttling periods the
//     sandbox's own CPU clocks (getrusage, /proc/<pid>/stat) read up to 1.5
//     times the CPU it really got; a longer period keeps them within a few
//     percent, at the price of coarser throttling (a saturated sandbox runs
//     for longer stretches and pauses longer).
//   - Memory: gVisor has no OOM killer; when its host cgroup hits the limit
//     the host kills the sentry and so the whole sandbox. The host cgroup
//     gets the sandbox's limit plus Config.MemoryHeadroom (the sentry's and
//     gofer's own memory, and a backstop), and the agent's memory watchdog
//     (ginit/oom.go) enforces the sandbox's limit inside, from gVisor's exact
//     account of the sandbox's memory, woken by the host whenever the host
//     cgroup's charge crosses a threshold (memwatch.go): over the limit it
//     SIGKILLs the user process with the highest badness, never the agent,
//     and counts an OOM event that Usage reports. The headroom is 128 MiB:
//     memory no process owns (a memfd written and kept) escapes the
//     watchdog, and the host cgroup then stops it, taking the sandbox down,
//     at most the headroom past the limit (probe 23's memfd bomb; with
//     256 MiB the bomb finished). /tmp, /dev/shm and the deeper targets'
//     writable layers are in memory and count (the layer of "/" too when it
//     cannot be on disk).
//   - Pids: gVisor's own pids cgroup (cgroup v2 inside the sandbox:
//     --in-sandbox-cgroup=v2), which refuses forks past the limit; the host
//     cgroup gets the limit plus Config.PidsHeadroom for the sentry's
//     threads and systrap's stub processes.
//   - Disk: the size of each writable layer (of "/", of the other targets',
//     and of /tmp), each capped at the disk limit by gVisor. The layer of
//     "/" is on the host's disk when Config.DiskDir is usable: its image
//     (slightly larger, see imageBytes) is the host's cap, and its pages are
//     not the sandbox's memory (scripts/runsc-patches/0004 keeps them so
//     after a restore). The other layers are in memory and count.
//   - Open files: RLIMIT_NOFILE, set by the init for everything it starts;
//     on the host, --dcache (Config.DentryCache) bounds the descriptors the
//     sentry and gofer keep open for cached files.
//
// The host cgroup is made with internal/isolation/cgroup (as for native
// sandboxes, with its device allowlist) and handed to runsc as the bundle's
// cgroupsPath: runsc moves the sentry and gofer into it and creates only the
// controllers it lacks (removed again by `runsc delete`).
//
// # Privileges
//
// wardend drives runsc as root: rootless runsc (--rootless) has no
// checkpoint/restore and no netstack, and gives up runsc's own host
// hardening. By default (Config.DirectFS false) the sentry runs as nobody in
// a user namespace that maps only nobody, with no capabilities at all,
// no_new_privs, seccomp, chrooted to an empty directory; every file it
// reaches goes through the gofer, a separate process (root with five file
// capabilities, seccomp) confined to the sandbox's root. With DirectFS the
// sentry opens files itself and keeps those file capabilities in a user
// namespace that maps host root: measured here, boot to first exec about
// 15% faster and a file-heavy walk about 25% faster, for a larger blast
// radius if the sentry falls. gVisor's --allow-suid and --net-raw stay off.
//
// runsc keeps one empty network namespace for all gofers under its state
// directory (RunDir/.runsc/null-netns, a bind mount that outlives sandboxes,
// as runsc intends).
//
// # Not supported
//
// Spec.Uppers (capturing the writable layer for template builds) is refused:
// Capabilities.CaptureUpper is false. Spec.RootCaps is honoured (root keeps
// those capabilities inside gVisor's kernel). Pause, resume and fork with
// memory are in checkpoint.go; the filesystem-only pause (backend.Restarter)
// is in coldrestart.go; volumes (Spec.Volumes) in volumes.go; filesystem
// snapshots of a running sandbox (backend.FSCapturer) in capture.go.
//
// # Network
//
// Without Spec.Network a sandbox runs with --network=none: loopback only.
// With it, the daemon puts the sandbox's link into a network namespace of
// its own between Create and Start (netns.go, backend.NetNSer),
// and runsc runs with --network=sandbox, so gVisor's netstack takes that
// namespace's devices at boot; all egress then goes through wardend's
// egress path as for a native sandbox.
package gvisor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
	"github.com/warden-sandbox/warden/internal/backend/hostproc"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
	"github.com/warden-sandbox/warden/internal/isolation/caps"
	"github.com/warden-sandbox/warden/internal/isolation/cgroup"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
	"github.com/warden-sandbox/warden/internal/isolation/seccomp"
)

// ID is the backend's registry name.
const ID = "gvisor"

// dirInside is gwire.Dir, the backend's directory in the sandbox's root.
const dirInside = gwire.Dir

// Names in the run directory besides the sandboxes' directories; sandbox
// ids cannot contain a dot, so these never collide with one.
const (
	runscStateDir = ".runsc"        // runsc --root
	agentCopy     = ".warden-agent" // the installed agent binary
)

var _ backend.Backend = (*Backend)(nil)
var _ backend.Pauser = (*Backend)(nil)
var _ backend.Eventer = (*Backend)(nil)
var _ backend.OrphanCleaner = (*Backend)(nil)
var _ backend.Sweeper = (*Backend)(nil)
var _ backend.NetNSer = (*Backend)(nil)

// Retry is how often wardend looks for a usable runsc again while the
// gvisor backend cannot run (scripts/run.sh builds runsc in the background
// while the daemon already serves native sandboxes).
const Retry = 10 * time.Second

func init() {
	backend.Register(backend.Registration{
		ID:          ID,
		Preflight:   Preflight,
		Retry:       Retry,
		Fingerprint: runscID,
		New: func(p backend.Params, decode func(any) error) (backend.Backend, error) {
			c := Config{RunDir: filepath.Join(p.RunDir, ID), AgentPath: p.AgentPath,
				CheckpointDir:   filepath.Join(p.StateDir, "gvisor-checkpoints"),
				KeptSnapshotDir: filepath.Join(p.StateDir, "gvisor-snapshots"),
				DiskDir:         filepath.Join(p.StateDir, "disks", ID)}
			if err := decode(&c); err != nil {
				return nil, fmt.Errorf("gvisor config: %w", err)
			}
			b, err := New(c)
			if err != nil {
				return nil, err
			}
			if medium, why := b.WritableLayer(); medium == "memory" && p.Log != nil {
				p.Log.Error("SANDBOX DISK IS MEMORY: gvisor sandboxes' writable layers cannot go on disk here and stay in gVisor's memory, charged to their memory limit (a large upload can end a sandbox)", "reason", why)
			}
			return b, nil
		},
	})
}

// runscID identifies the runsc on PATH (path, size, mtime), "" if none: a
// new or rebuilt runsc is preflighted at once, not after the rate limit.
func runscID() string {
	p, err := exec.LookPath("runsc")
	if err != nil {
		return ""
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano())
}

// Config configures the gvisor backend.
type Config struct {
	// RunDir holds one directory per sandbox (bundle, root mount, control
	// socket, writable layer, logs), runsc's state (RunDir/.runsc) and a
	// copy of the agent (RunDir/.warden-agent).
	RunDir string `json:"run_dir" yaml:"run_dir"`
	// AgentPath is the warden-agent binary (static); default: next to the
	// running executable, then $PATH.
	AgentPath string `json:"agent_path" yaml:"agent_path"`
	// Runsc is the runsc binary; default: "runsc" on $PATH.
	Runsc string `json:"runsc" yaml:"runsc"`
	// Platform is gVisor's platform; default "systrap".
	Platform string `json:"platform" yaml:"platform"`
	// DirectFS lets the sentry open files itself (see the package doc).
	DirectFS bool `json:"directfs" yaml:"directfs"`
	// MemoryHeadroom is added to the sandbox's memory limit for its host
	// cgroup (the sentry's own memory and a backstop); default 128 MiB.
	MemoryHeadroom int64 `json:"memory_headroom" yaml:"memory_headroom"`
	// PidsHeadroom is added to the sandbox's pids limit for its host
	// cgroup (the sentry's threads, systrap's stubs); default 512.
	PidsHeadroom int64 `json:"pids_headroom" yaml:"pids_headroom"`
	// CPUPeriod is the CFS period of the host cgroup's CPU quota; default
	// 500ms (see the package doc).
	CPUPeriod time.Duration `json:"cpu_period" yaml:"cpu_period"`
	// DentryCache bounds the dentries gVisor caches per sandbox, and so the
	// host file descriptors its sentry and gofer keep open (--dcache);
	// default 256.
	DentryCache int `json:"dentry_cache" yaml:"dentry_cache"`
	// DiskDir, when set, puts the writable layer of "/" on the host's
	// disk: gVisor's overlay keeps it in a file (its filestore) in a
	// per-sandbox ext4 image in this directory, loop-mounted on the
	// sandbox's Dir/upper (package diskimg), so the host enforces the size
	// whatever the sentry does. Empty, or a host that cannot mount images:
	// DiskOverlay decides. Pause and fork work either way (see
	// checkpoint.go).
	DiskDir string `json:"disk_dir" yaml:"disk_dir"`
	// DiskOverlay, without a usable DiskDir, puts the writable layer of "/"
	// in a host file of the run directory (sparse, capped only by gVisor's
	// own overlay size) instead of memory.
	DiskOverlay bool `json:"disk_overlay" yaml:"disk_overlay"`
	// StartTimeout bounds how long Start waits for the agent.
	StartTimeout time.Duration `json:"start_timeout" yaml:"start_timeout"`
	// Debug makes runsc write debug logs to each sandbox's run directory.
	Debug bool `json:"debug" yaml:"debug"`
	// CheckpointDir holds paused sandboxes' checkpoints, one directory per
	// sandbox (default RunDir/checkpoints). It belongs on a disk that
	// survives a reboot, not on /run's tmpfs: wardend puts it under its
	// state directory, so a paused sandbox's memory leaves RAM and the
	// sandbox survives a host reboot.
	CheckpointDir string `json:"checkpoint_dir" yaml:"checkpoint_dir"`
	// KeptSnapshotDir holds the memory images kept with named snapshots
	// (keep.go; default RunDir/kept-snapshots, wardend puts it under its
	// state directory): unlike fork images, they survive a restart.
	KeptSnapshotDir string `json:"kept_snapshot_dir" yaml:"kept_snapshot_dir"`
}

func (c *Config) defaults() {
	if c.RunDir == "" {
		c.RunDir = "/run/warden/gvisor"
	}
	if c.Runsc == "" {
		c.Runsc = "runsc"
	}
	if c.CheckpointDir == "" {
		c.CheckpointDir = filepath.Join(c.RunDir, "checkpoints")
	}
	if c.KeptSnapshotDir == "" {
		c.KeptSnapshotDir = filepath.Join(c.RunDir, "kept-snapshots")
	}
	if c.Platform == "" {
		c.Platform = "systrap"
	}
	if c.MemoryHeadroom == 0 {
		c.MemoryHeadroom = 128 << 20
	}
	if c.PidsHeadroom == 0 {
		c.PidsHeadroom = 512
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.CPUPeriod == 0 {
		c.CPUPeriod = 500 * time.Millisecond
	}
	if c.DentryCache == 0 {
		c.DentryCache = 256
	}
}

// InstallHint is how to get runsc.
const InstallHint = "build and install it with scripts/install-runsc.sh (as root)"

// PatchMark is in the version of a runsc built by scripts/install-runsc.sh.
const PatchMark = "+warden-"

// Preflight reports why this host cannot run gVisor sandboxes.
func Preflight() error { return preflight("runsc") }

func preflight(runscPath string) error {
	if os.Geteuid() != 0 {
		return errors.New("gvisor backend needs root (it drives runsc as root and mounts template layers)")
	}
	p, err := exec.LookPath(runscPath)
	if err != nil {
		return fmt.Errorf("runsc not found (%v): %s", err, InstallHint)
	}
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "runsc version") {
		return fmt.Errorf("%s --version failed (%v: %s): %s", p, err, strings.TrimSpace(string(out)), InstallHint)
	}
	// Warden's fixes to gVisor (scripts/runsc-patches) matter for the
	// sandbox's security: an unpatched runsc lets the agent's file API
	// follow symlinks out of a target directory.
	if v, _, _ := strings.Cut(string(out), "\n"); !strings.Contains(v, PatchMark) {
		return fmt.Errorf("%s is %q, not a build with Warden's gVisor patches (version ending %s...): %s", p, strings.TrimSpace(v), PatchMark, InstallHint)
	}
	if _, err := cgroup.Available(); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		return errors.New("the kernel has no overlayfs (needed to stack template layers)")
	}
	return nil
}

// Backend is the gvisor backend.
type Backend struct {
	cfg     Config
	runsc   string // absolute path
	agent   string // the installed agent copy
	seccomp []byte

	disk    *diskimg.Pool // nil: no image per sandbox (see Config.DiskDir)
	diskErr error         // why not, when DiskDir was set

	boxes hostproc.Table[*box] // the live sandboxes
}

// box is the live state of one sandbox.
type box struct {
	id    string
	state handleData
	spec  backend.Spec

	mu      sync.Mutex // serialises Start, Pause and Resume
	started bool
	paused  atomic.Bool
	killed  atomic.Bool // by Stop, Kill or Delete
	pidfd   int
	// exited is closed when the current sentry process exits; a restore
	// starts a new sentry with a new channel. onDisk is set while the
	// sandbox is checkpointed (paused with no sentry at all).
	exited chan struct{}
	onDisk atomic.Bool
	// fsRestore, while Restart boots the sandbox, is the filesystem
	// checkpoint its writable layer is restored from (coldrestart.go).
	fsRestore string

	cgMu sync.Mutex
	cg   *cgroup.Group

	// A filesystem capture raises the host cgroup's memory limit while it
	// runs; lowerMemory puts it back (capturemem.go).
	memMu     sync.Mutex
	capturing bool
	lowering  atomic.Bool

	exitOnce sync.Once
	done     chan struct{} // closed when the sentry has exited
	exit     backend.ExitStatus

	goneOnce sync.Once
	gone     chan struct{} // closed when the sandbox is deleted or forgotten
}

// handleData is the backend-private part of a Handle.
type handleData struct {
	Dir       string `json:"dir"`
	Cgroup    string `json:"cgroup"`
	DiskBytes int64  `json:"disk_bytes,omitempty"` // the root overlay's size, which a restore needs again
	// Network: the sandbox runs in the network namespace bound at
	// Dir/netns (runsc --network=sandbox); otherwise --network=none.
	Network bool `json:"network,omitempty"`
	// Layers are the template's: a snapshot's forks must present the same.
	Layers    []backend.Layer `json:"layers,omitempty"`
	Pid       int             `json:"pid,omitempty"`        // the sentry (runsc-sandbox) on the host
	StartTime uint64          `json:"start_time,omitempty"` // /proc/<pid>/stat field 22, guards against pid reuse
	// OnDisk: the sandbox is checkpointed in Dir/checkpoint and has no
	// process on the host.
	OnDisk bool `json:"on_disk,omitempty"`
	// Kept: StopKeep stopped the sandbox; its writable layer is the
	// filesystem checkpoint in CheckpointDir/<id> and nothing of it runs
	// (coldrestart.go).
	Kept bool `json:"kept,omitempty"`
}

// New builds the backend.
func New(cfg Config) (*Backend, error) {
	cfg.defaults()
	rp, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("runsc not found (%v): %s", err, InstallHint)
	}
	if rp, err = filepath.Abs(rp); err != nil {
		return nil, err
	}
	agentPath, err := hostproc.FindAgent(cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	if err := os.Chmod(cfg.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	if err := os.MkdirAll(cfg.CheckpointDir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint dir: %w", err)
	}
	// A root-owned read-only copy in the run directory: it cannot be
	// swapped under running sandboxes, and sandboxes hard-link it.
	if agentPath, err = installAgent(agentPath, cfg.RunDir); err != nil {
		return nil, err
	}
	pol, err := seccomp.Load()
	if err != nil {
		return nil, err
	}
	prog, err := pol.Assemble()
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, runsc: rp, agent: agentPath, seccomp: sbinit.EncodeProgram(prog)}
	if cfg.DiskDir != "" {
		if b.disk, err = diskimg.New(cfg.DiskDir); err != nil {
			b.disk, b.diskErr = nil, err
		}
	}
	return b, nil
}

// WritableLayer says where the writable layer of "/" lives: "disk" (gVisor's
// filestore in a size-limited image on the host's disk), "file" (the
// filestore in the run directory, Config.DiskOverlay) or "memory" (gVisor's
// memory, charged to the sandbox), and, when disk was asked for and is not
// used, why.
func (b *Backend) WritableLayer() (string, error) {
	switch {
	case b.disk != nil:
		return "disk", nil
	case b.cfg.DiskOverlay:
		return "file", b.diskErr
	}
	return "memory", b.diskErr
}

// fileOverlay reports whether the writable layer of "/" is a host file.
func (b *Backend) fileOverlay() bool { return b.disk != nil || b.cfg.DiskOverlay }

// imageBytes is the size of a sandbox's disk image for a disk limit of
// limit bytes. gVisor's overlay enforces the limit itself (ENOSPC inside the
// sandbox, --overlay2=...,size=); the image is the host's backstop and is a
// little larger, so that the filestore's own slack (page-granular
// allocation, ext4 metadata) never makes the host refuse a write gVisor
// allowed: the sentry writes the filestore through a memory mapping, where
// a host ENOSPC would be a fault, not an error the sandbox sees.
func imageBytes(limit int64) int64 {
	return limit + max(limit/16, 64<<20)
}

// mountUpper gives sandbox id its disk image on st.upper(), unless it has
// it already or the backend keeps no images. A stale image of an earlier
// sandbox of that id is removed first.
func (b *Backend) mountUpper(id string, st handleData) error {
	if b.disk == nil || diskimg.Mounted(st.upper()) {
		return nil
	}
	if err := b.disk.Remove(id, st.upper()); err != nil {
		return err
	}
	if err := b.disk.Mount(id, imageBytes(st.DiskBytes), st.upper(), 0); err != nil {
		return fmt.Errorf("sandbox disk: %w", err)
	}
	return nil
}

// releaseUpper unmounts and deletes sandbox id's disk image, if any.
func (b *Backend) releaseUpper(id string, st handleData) error {
	if b.disk != nil {
		return b.disk.Remove(id, st.upper())
	}
	return diskimg.Unmount(st.upper())
}

// Sweep implements backend.Sweeper: disk images no sandbox owns
// (PurgeDisks) and the snapshots of forks a crash interrupted
// (PurgeSnapshots).
func (b *Backend) Sweep(context.Context) error {
	var errs []error
	if err := b.PurgeDisks(); err != nil {
		errs = append(errs, fmt.Errorf("remove leftover disk images: %w", err))
	}
	if err := b.PurgeSnapshots(); err != nil {
		errs = append(errs, fmt.Errorf("remove leftover fork snapshots: %w", err))
	}
	return errors.Join(errs...)
}

// PurgeDisks deletes disk images no known sandbox owns (a crash between the
// image and the run directory, or a reboot that took the run directory of
// a sandbox that is gone). Call it after Recover.
func (b *Backend) PurgeDisks() error {
	if b.disk == nil {
		return nil
	}
	ids, err := b.disk.Images()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if b.boxes.Live(id) {
			continue
		}
		if err := b.disk.Remove(id, handleData{Dir: filepath.Join(b.cfg.RunDir, id)}.upper()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// installAgent copies the agent binary to dir/.warden-agent (0555), replacing
// an older copy atomically, and returns the copy's path.
func installAgent(src, dir string) (string, error) {
	dst := filepath.Join(dir, agentCopy)
	tmp := filepath.Join(dir, agentCopy+"-"+strconv.Itoa(os.Getpid()))
	if err := copyFile(src, tmp, 0o555); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install agent: %w", err)
	}
	return dst, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ID implements backend.Backend.
func (b *Backend) ID() string { return ID }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: "gvisor", Pause: true, MemorySnapshot: true, Fork: true, Events: true, Network: backend.NetworkBeforeStart, NeedsRoot: true, ColdRestart: true, Volumes: true}
}

// Paths of a sandbox's run directory.
func (st handleData) bundle() string   { return filepath.Join(st.Dir, "bundle") }
func (st handleData) rootfs() string   { return filepath.Join(st.Dir, "rootfs") }
func (st handleData) scaffold() string { return filepath.Join(st.Dir, "scaffold") }
func (st handleData) control() string  { return filepath.Join(st.Dir, "control") }
func (st handleData) upper() string    { return filepath.Join(st.Dir, "upper") }
func (st handleData) lower() string    { return filepath.Join(st.Dir, "lower") }
func (st handleData) socket() string   { return filepath.Join(st.control(), gwire.SocketName) }
func (st handleData) logPath() string  { return filepath.Join(st.Dir, "sandbox.log") }
func (st handleData) netns() string    { return filepath.Join(st.Dir, "netns") }
func (st handleData) pidFile() string  { return filepath.Join(st.Dir, "sandbox.pid") }

// sandboxPid is the sentry's pid as runsc's --pid-file records it (one
// runsc process less than asking runsc state).
type sandboxPid struct{ Pid int }

func readPidFile(path string) (sandboxPid, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return sandboxPid{}, fmt.Errorf("sandbox pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return sandboxPid{}, fmt.Errorf("sandbox pid: %q is not a pid", raw)
	}
	return sandboxPid{Pid: pid}, nil
}

// cgroupName is the sandbox's host cgroup: "gv-" and the id, or a digest of
// a long id (cgroup names are at most 63 bytes).
func cgroupName(id string) string {
	if n := "gv-" + id; len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(id))
	return "gv-" + id[:40] + "-" + hex.EncodeToString(sum[:])[:16]
}

// runscFor returns the runsc command line of sandbox st.
func (b *Backend) runscFor(st handleData, diskBytes int64) runsc {
	flags := []string{
		"--root=" + filepath.Join(b.cfg.RunDir, runscStateDir),
		"--platform=" + b.cfg.Platform,

		"--host-uds=create",
		"--in-sandbox-cgroup=v2",
		"--dcache=" + strconv.Itoa(b.cfg.DentryCache),
		"--directfs=" + strconv.FormatBool(b.cfg.DirectFS),
	}
	if st.Network {
		// gVisor's netstack on the TUN device wardend put in the sandbox's
		// namespace (a packet socket on it). Without segmentation offload:
		// with gVisor's software GSO, data segments never reached the
		// other end of the TUN device (handshakes did).
		flags = append(flags, "--network=sandbox", "--gso=false", "--software-gso=false")
	} else {
		flags = append(flags, "--network=none")
	}
	medium := "memory"
	if b.fileOverlay() {
		medium = "dir=" + st.upper()
	}
	flags = append(flags, "--overlay2=root:"+medium+",size="+strconv.FormatInt(diskBytes, 10))
	if b.cfg.Debug {
		flags = append(flags, "--debug", "--debug-log="+st.Dir+"/runsc-debug/")
	}
	return runsc{path: b.runsc, flags: flags}
}

func (b *Backend) handle(bx *box) backend.Handle {
	raw, _ := json.Marshal(bx.state)
	return backend.Handle{Version: backend.HandleVersion, Backend: ID, ID: bx.id, Data: raw}
}

func (b *Backend) lookup(h backend.Handle) (*box, error) {
	return b.boxes.Lookup(h.ID)
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (h backend.Handle, err error) {
	if err := spec.Validate(); err != nil {
		return h, err
	}
	if len(spec.Uppers) > 0 {
		return h, fmt.Errorf("%w: the gvisor backend cannot capture writable layers (Spec.Uppers)", backend.ErrInvalidSpec)
	}
	if err := checkVolumeTargets(spec.Volumes); err != nil {
		return h, err
	}
	spec.Limits = spec.Limits.WithDefaults()
	for _, l := range spec.Layers {
		if st, err := os.Stat(l.Path); err != nil || !st.IsDir() {
			return h, fmt.Errorf("%w: layer %s is not a directory", backend.ErrInvalidSpec, l.Path)
		}
	}
	if _, err := caps.ByName(spec.RootCaps); err != nil {
		return h, fmt.Errorf("%w: %w", backend.ErrInvalidSpec, err)
	}
	bx := &box{id: spec.ID, spec: spec, pidfd: -1, done: make(chan struct{}), gone: make(chan struct{})}
	if !b.boxes.Reserve(spec.ID, bx) {
		return h, fmt.Errorf("%w: id %s already in use", backend.ErrInvalidSpec, spec.ID)
	}
	defer func() {
		if err != nil {
			b.cleanup(context.WithoutCancel(ctx), bx.state, bx.id)
			b.forget(bx)
		}
	}()
	bx.state = handleData{Dir: filepath.Join(b.cfg.RunDir, spec.ID), Cgroup: cgroupName(spec.ID), DiskBytes: spec.Limits.DiskBytes, Layers: spec.Layers, Network: spec.Network}
	st := bx.state
	if b.stale(st, spec.ID) {
		b.cleanup(ctx, st, spec.ID) // left by a crashed run
	}
	for _, d := range []string{st.Dir, st.bundle(), st.rootfs(), st.scaffold(), st.control(), st.upper(), st.lower()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return h, fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	if err := b.mountUpper(spec.ID, st); err != nil {
		return h, err
	}
	if raw, err := json.Marshal(spec); err != nil {
		return h, fmt.Errorf("encode spec: %w", err)
	} else if err := os.WriteFile(filepath.Join(st.Dir, specFile), raw, 0o600); err != nil {
		return h, fmt.Errorf("write spec: %w", err)
	}
	targets, byTarget := layerTargets(spec.Layers)
	if err := buildScaffold(st.scaffold(), b.agent, byTarget["/"], targets, len(targets)-1); err != nil {
		return h, fmt.Errorf("sandbox scaffold: %w", err)
	}
	if err := volumePoints(st.scaffold(), len(spec.Volumes)); err != nil {
		return h, fmt.Errorf("sandbox scaffold: %w", err)
	}
	if err := composeRoot(st.rootfs(), st.scaffold(), byTarget["/"]); err != nil {
		return h, fmt.Errorf("sandbox root: %w", err)
	}
	var lowers []lower
	for i, t := range targets[1:] {
		src, err := composeLower(filepath.Join(st.lower(), strconv.Itoa(i)), byTarget[t])
		if err != nil {
			return h, fmt.Errorf("layers of %s: %w", t, err)
		}
		lowers = append(lowers, lower{target: t, source: src, inside: gwire.LowerDir + "/" + strconv.Itoa(i)})
	}
	if spec.Network {
		if err := makeNetNS(st.netns()); err != nil {
			return h, err
		}
	}
	if err := b.writeBundle(bx, lowers); err != nil {
		return h, err
	}
	l := spec.Limits
	cg, err := cgroup.Create(st.Cgroup, cgroup.Limits{
		CPUMillis:       l.CPUMillis,
		CPUPeriodMicros: b.cfg.CPUPeriod.Microseconds(),
		MemoryBytes:     l.MemoryBytes + b.cfg.MemoryHeadroom,
		Pids:            l.Pids + b.cfg.PidsHeadroom,
	})
	if err != nil {
		return h, fmt.Errorf("create cgroup: %w", err)
	}
	bx.cgMu.Lock()
	bx.cg = cg
	bx.cgMu.Unlock()
	return b.handle(bx), nil
}

// allCaps are the capabilities the init starts with, inside gVisor's kernel
// only: it mounts and creates devices, then gives every process it starts
// an empty bounding set.
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_ADMIN", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_SETFCAP",
}

// lower is a deeper target's read-only layers, bound into the sandbox at
// inside for the init to overlay at target.
type lower struct{ target, source, inside string }

// writeBundle writes the OCI bundle and the init's configuration.
func (b *Backend) writeBundle(bx *box, lowers []lower) error {
	spec, st := bx.spec, bx.state
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	rootCaps, err := caps.ByName(spec.RootCaps)
	if err != nil {
		return err
	}
	l := spec.Limits
	icfg := gwire.Config{
		Hostname:    hostname,
		MemoryBytes: l.MemoryBytes,
		Pids:        l.Pids,
		TmpBytes:    l.DiskBytes,
		ShmBytes:    min(l.MemoryBytes/2, 64<<20),
		OpenFiles:   l.OpenFiles,
		RootCaps:    rootCaps,
		Seccomp:     b.seccomp,
		Agent:       agentcfg.Config{DefaultUser: spec.User, DefaultWorkdir: spec.Workdir, Env: spec.Env, DiskBytes: l.DiskBytes, Sudo: spec.Sudo},
		UpperBytes:  l.DiskBytes,
		ResolvConf:  spec.ResolvConf,
	}
	for _, lw := range lowers {
		icfg.Mounts = append(icfg.Mounts, gwire.Mount{Target: lw.target, Lower: lw.inside})
	}
	icfg.Volumes = volumeConfig(spec.Volumes)
	if err := gwire.WriteConfig(filepath.Join(st.scaffold(), strings.TrimPrefix(gwire.ConfigPath, "/")), icfg); err != nil {
		return err
	}
	oci := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{gwire.AgentPath, "gvisor-init"},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: allCaps, Effective: allCaps, Permitted: allCaps,
			},
		},
		Root:     &specs.Root{Path: st.rootfs()},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: gwire.ControlDir, Type: "bind", Source: st.control(), Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cgroup.Parent + "/" + st.Cgroup,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
	for _, lw := range lowers {
		// Read-only: runsc puts no overlay of its own on it.
		oci.Mounts = append(oci.Mounts, specs.Mount{Destination: lw.inside, Type: "bind", Source: lw.source,
			Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	oci.Mounts = append(oci.Mounts, volumeMounts(spec.Volumes)...)
	if st.Network {
		oci.Linux.Namespaces[1].Path = st.netns()
	}
	raw, err := json.MarshalIndent(&oci, "", "  ")
	if err != nil {
		return fmt.Errorf("encode bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(st.bundle(), "config.json"), raw, 0o600); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}

// forget drops a box from the table.
func (b *Backend) forget(bx *box) {
	bx.goneOnce.Do(func() { close(bx.gone) })
	b.boxes.Delete(bx.id, bx)
}

// stale reports whether anything of an earlier sandbox id is left: its run
// directory, runsc's state or its cgroup.
func (b *Backend) stale(st handleData, id string) bool {
	if _, err := os.Lstat(st.Dir); err == nil {
		return true
	}
	if m, _ := filepath.Glob(filepath.Join(b.cfg.RunDir, runscStateDir, id+"_sandbox:*")); len(m) > 0 {
		return true
	}
	m, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroup.Parent + "/" + st.Cgroup)
	if len(m) > 0 {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup" + cgroup.Parent + "/" + st.Cgroup)
	return err == nil
}

// cleanup frees every host resource of sandbox id described by st: runsc's
// state and processes, the cgroups, the root mounts and the run directory.
// It is safe on partial or missing state.
func (b *Backend) cleanup(ctx context.Context, st handleData, id string) error {
	var errs []error
	if st.Dir == "" || filepath.Dir(st.Dir) != filepath.Clean(b.cfg.RunDir) || filepath.Base(st.Dir) != id {
		return fmt.Errorf("%s: refusing to clean up run directory %q", id, st.Dir)
	}
	r := b.runscFor(st, 1)
	if cg, err := cgroup.Load(st.Cgroup); err == nil {
		cg.Kill()
	}
	if _, err := os.Stat(filepath.Join(b.cfg.RunDir, runscStateDir)); err == nil {
		// Removes runsc's state and the cgroup controllers runsc made.
		if _, err := r.run(ctx, "delete", "--force", id); err != nil && !strings.Contains(err.Error(), "does not exist") &&
			!strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	if err := unmountAll(st.rootfs()); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Unmount(st.netns(), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount netns: %w", err))
	}
	if m, _ := filepath.Glob(filepath.Join(st.lower(), "*")); len(m) > 0 {
		for _, d := range m {
			if err := unmountAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := b.releaseUpper(id, st); err != nil {
		errs = append(errs, err)
	}
	if cg, err := cgroup.Load(st.Cgroup); err == nil {
		if err := cg.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	// Controllers runsc created itself (cpuset, blkio, ...), in case its
	// delete did not get to them.
	if m, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroup.Parent + "/" + st.Cgroup); len(m) > 0 {
		for _, d := range m {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(st.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	return errors.Join(errs...)
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.started || bx.state.Kept {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrAlreadyStart)
	}
	if err := b.start(ctx, bx); err != nil {
		return h, err
	}
	return b.handle(bx), nil
}

// start boots bx; the caller holds bx.mu.
func (b *Backend) start(ctx context.Context, bx *box) (err error) {
	if err := b.checkVolumes(bx); err != nil {
		return fmt.Errorf("start sandbox %s: %w", bx.id, err)
	}
	bx.started = true
	st := &bx.state
	r := b.runscFor(*st, bx.spec.Limits.DiskBytes)
	deadline := time.Now().Add(b.cfg.StartTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	logf, err := os.OpenFile(st.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox log: %w", err)
	}
	defer logf.Close()
	// The sandbox inherits stdout and stderr: the agent's log.
	args := append(append([]string{}, r.flags...), "--log="+filepath.Join(st.Dir, "runsc.log"),
		"create", "--pid-file="+st.pidFile(), "--bundle", st.bundle())
	if bx.fsRestore != "" {
		args = append(args, "--fs-restore-image-path="+bx.fsRestore)
	}
	args = append(args, bx.id)
	cmd := exec.CommandContext(sctx, r.path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start sandbox %s: runsc create: %v: %s", bx.id, err, b.logTail(*st))
	}
	defer func() {
		if err != nil {
			b.killSandbox(context.WithoutCancel(ctx), bx)
		}
	}()
	cs, err := readPidFile(st.pidFile())
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", bx.id, err)
	}
	if st.StartTime, err = hostproc.StartTime(cs.Pid); err != nil {
		return fmt.Errorf("start sandbox %s: %w", bx.id, err)
	}
	if bx.pidfd, err = unix.PidfdOpen(cs.Pid, 0); err != nil {
		return fmt.Errorf("start sandbox %s: pidfd: %w", bx.id, err)
	}
	if t, err := hostproc.StartTime(cs.Pid); err != nil || t != st.StartTime {
		return fmt.Errorf("start sandbox %s: the sandbox process exited: %s", bx.id, b.logTail(*st))
	}
	st.Pid = cs.Pid
	bx.exited = make(chan struct{})
	go bx.watch(bx.pidfd, bx.exited)
	if _, err := r.run(sctx, "start", bx.id); err != nil {
		return fmt.Errorf("start sandbox %s: %w: %s", bx.id, err, b.logTail(*st))
	}
	if err := b.waitAgent(sctx, bx); err != nil {
		return fmt.Errorf("start sandbox %s: %w", bx.id, err)
	}
	go b.watchMemory(bx, bx.exited)
	b.saveState(bx)
	return nil
}

// waitAgent polls the agent's socket until /health answers.
func (b *Backend) waitAgent(ctx context.Context, bx *box) error {
	delay := 2 * time.Millisecond
	for {
		select {
		case <-bx.done:
			return fmt.Errorf("the sandbox exited during boot: %s", b.logTail(bx.state))
		default:
		}
		if healthy(ctx, bx.state.socket()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not ready: %w: %s", ctx.Err(), b.logTail(bx.state))
		case <-bx.done:
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// healthy reports whether the agent at sock answers GET /health.
func healthy(ctx context.Context, sock string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "HTTP/1.1 204") || strings.HasPrefix(line, "HTTP/1.1 200"))
}

// logTail returns the end of the sandbox's log, for error messages.
func (b *Backend) logTail(st handleData) string {
	var out []string
	for _, p := range []string{st.logPath(), filepath.Join(st.Dir, "runsc.log")} {
		raw, err := os.ReadFile(p)
		if err != nil || len(raw) == 0 {
			continue
		}
		if len(raw) > 1500 {
			raw = raw[len(raw)-1500:]
		}
		out = append(out, filepath.Base(p)+": "+strings.TrimSpace(string(raw)))
	}
	if len(out) == 0 {
		return "(no log)"
	}
	return strings.Join(out, "; ")
}

// watch waits for a sentry to exit. The sandbox ends with it, unless a
// checkpoint ended it on purpose.
func (bx *box) watch(pidfd int, exited chan struct{}) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		break
	}
	close(exited)
	if bx.onDisk.Load() && !bx.killed.Load() {
		return
	}
	es := backend.ExitStatus{Code: -1, Reason: "the sandbox's kernel exited"}
	if bx.killed.Load() {
		es.Signal = int(syscall.SIGKILL)
		es.Code = 128 + es.Signal
		es.Reason = "sandbox killed"
	} else if n := bx.oomEvents(); n > 0 {
		es.Reason = fmt.Sprintf("out of memory: the sandbox's kernel exited after %d OOM kill(s) at its memory limit", n)
		if m := bx.spec.Limits.MemoryBytes; m > 0 {
			es.Reason += fmt.Sprintf(" (%d MiB)", m>>20)
		}
	}
	bx.finish(es)
}

func (bx *box) finish(es backend.ExitStatus) {
	bx.exitOnce.Do(func() {
		bx.exit = es
		close(bx.done)
	})
}

func (bx *box) running() bool {
	select {
	case <-bx.done:
		return false
	default:
		return bx.state.Pid != 0 || bx.onDisk.Load()
	}
}

func (b *Backend) saveState(bx *box) { hostproc.WriteHandle(bx.state.Dir, b.handle(bx)) }

// group returns the sandbox's cgroup, loading it after a recovery.
func (bx *box) group() (*cgroup.Group, error) {
	bx.cgMu.Lock()
	defer bx.cgMu.Unlock()
	if bx.cg != nil {
		return bx.cg, nil
	}
	cg, err := cgroup.Load(bx.state.Cgroup)
	if err != nil {
		return nil, fmt.Errorf("load cgroup: %w", err)
	}
	bx.cg = cg
	return cg, nil
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, h backend.Handle, grace time.Duration) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	if !bx.running() {
		return nil
	}
	if bx.onDisk.Load() {
		return b.Kill(ctx, h) // checkpointed: nothing runs to stop
	}
	r := b.runscFor(bx.state, 1)
	if bx.paused.Load() {
		r.run(ctx, "resume", bx.id)
	}
	// The init catches SIGTERM; everything else gets it.
	if _, err := r.run(ctx, "kill", "--all", bx.id, "TERM"); err == nil && grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case <-ctx.Done():
				break wait
			case <-bx.done:
				break wait
			case <-tick.C:
				if pids, err := r.procs(ctx, bx.id); err != nil || len(pids) <= 1 {
					break wait
				}
			}
		}
	}
	return b.Kill(ctx, h)
}

// Kill implements backend.Backend.
func (b *Backend) Kill(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	if bx.state.Pid == 0 && !bx.onDisk.Load() {
		return nil
	}
	return b.killSandbox(ctx, bx)
}

// killSandbox ends the sentry, the gofer and every stub at once (SIGKILL to
// the whole host cgroup) and waits for the sentry to be gone.
func (b *Backend) killSandbox(ctx context.Context, bx *box) error {
	bx.killed.Store(true)
	if bx.onDisk.Load() {
		// Checkpointed: no process to kill; the sandbox ends here.
		bx.finish(backend.ExitStatus{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: "sandbox killed"})
		return nil
	}
	if bx.pidfd >= 0 {
		unix.PidfdSendSignal(bx.pidfd, unix.SIGKILL, nil, 0)
	}
	if cg, err := bx.group(); err == nil {
		cg.Kill()
	}
	if bx.pidfd < 0 {
		return nil
	}
	select {
	case <-bx.done:
		return nil
	case <-bx.exited:
		// A sentry of a sandbox being checkpointed: watch saw the kill.
		bx.finish(backend.ExitStatus{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: "sandbox killed"})
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait implements backend.Backend.
func (b *Backend) Wait(ctx context.Context, h backend.Handle) (backend.ExitStatus, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return backend.ExitStatus{}, err
	}
	if bx.state.Pid == 0 && !bx.onDisk.Load() {
		return backend.ExitStatus{}, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	select {
	case <-bx.done:
		return bx.exit, nil
	case <-ctx.Done():
		return backend.ExitStatus{}, ctx.Err()
	}
}

// Status implements backend.Backend.
func (b *Backend) Status(ctx context.Context, h backend.Handle) (backend.State, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return "", err
	}
	if bx.state.Kept {
		return backend.StateStopped, nil
	}
	if bx.state.Pid == 0 && !bx.onDisk.Load() {
		return backend.StateCreated, nil
	}
	if !bx.running() {
		return backend.StateStopped, nil
	}
	if bx.paused.Load() {
		return backend.StatePaused, nil
	}
	return backend.StateRunning, nil
}

// Usage implements backend.Backend. CPU and memory are the host cgroup's
// (the sandbox's processes and the sentry and gofer serving them); Pids is
// not observable from the host (the pids limit lives in gVisor's kernel):
// -1. OOM events are the memory watchdog's kills plus any
// kill by the host's OOM killer.
func (b *Backend) Usage(ctx context.Context, h backend.Handle) (backend.Usage, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return backend.Usage{}, err
	}
	cg, err := bx.group()
	if err != nil {
		return backend.Usage{}, err
	}
	s, err := cg.Stats()
	if err != nil {
		return backend.Usage{}, fmt.Errorf("cgroup stats: %w", err)
	}
	u := backend.Usage{CPUNanos: int64(s.CPUNanos), MemoryBytes: int64(s.MemoryBytes), MemoryPeak: int64(s.MemoryPeak),
		Pids: -1, OOMEvents: bx.oomEvents(), DiskBytes: -1}
	switch {
	case b.disk != nil:
		u.DiskBytes = imageUsed(bx.state.upper())
	case bx.running() && b.cfg.DiskOverlay:
		u.DiskBytes = upperBytes(bx.state)
	}
	return u, nil
}

// oomEvents is the sandbox's OOM count: the memory watchdog's kills plus the
// host OOM killer's.
func (bx *box) oomEvents() int64 {
	var n int64
	if raw, err := os.ReadFile(filepath.Join(bx.state.control(), gwire.OOMFileName)); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && v > 0 {
			n = v
		}
	}
	if cg, err := bx.group(); err == nil {
		if s, err := cg.Stats(); err == nil {
			n += int64(s.OOMEvents)
		}
	}
	return n
}

// eventPoll is how often Events looks at the OOM count.
const eventPoll = 250 * time.Millisecond

// Events implements backend.Eventer: OOM kills in the sandbox, by the memory
// watchdog or the host's OOM killer (which ends the whole sandbox). The
// channel closes when the sandbox is deleted.
func (b *Backend) Events(ctx context.Context, h backend.Handle) (<-chan backend.Event, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, err
	}
	if bx.state.Pid == 0 && !bx.onDisk.Load() {
		return nil, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	out := make(chan backend.Event, 4)
	go func() {
		defer close(out)
		last := bx.oomEvents()
		t := time.NewTicker(eventPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-bx.gone:
				return
			case <-t.C:
			}
			n := bx.oomEvents()
			if n <= last {
				continue
			}
			last = n
			select {
			case out <- backend.Event{Kind: "oom", Time: time.Now(), Detail: "the sandbox reached its memory limit: a process was killed"}:
			default: // a slow reader loses merged events; Usage has exact counts
			}
		}
	}()
	return out, nil
}

// imageUsed is the space used in the disk image mounted on dir (the
// filestore's allocated blocks), or -1 when none is mounted there (a
// paused sandbox's writable layer is in its checkpoint).
func imageUsed(dir string) int64 {
	if !diskimg.Mounted(dir) {
		return -1
	}
	var sf unix.Statfs_t
	if unix.Statfs(dir, &sf) != nil {
		return -1
	}
	return int64(sf.Blocks-sf.Bfree) * sf.Bsize
}

// upperBytes is the space the sandbox's writable layer takes on the host:
// the allocated size of the overlay's filestore, an unlinked file in the
// run directory that the sentry holds open.
func upperBytes(st handleData) int64 {
	dir := fmt.Sprintf("/proc/%d/fd", st.Pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	prefix := st.upper() + "/"
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(l, prefix) {
			continue
		}
		var sb unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &sb) == nil {
			return sb.Blocks * 512
		}
	}
	return -1
}

// DialAgent implements backend.Backend.
func (b *Backend) DialAgent(ctx context.Context, h backend.Handle) (net.Conn, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, err
	}
	if !bx.running() || bx.onDisk.Load() {
		return nil, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", bx.state.socket())
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	return c, nil
}

// Recover implements backend.Backend.
func (b *Backend) Recover(ctx context.Context, h backend.Handle) error {
	var st handleData
	if h.Backend != ID || h.Version != backend.HandleVersion || json.Unmarshal(h.Data, &st) != nil {
		return fmt.Errorf("%s: unreadable handle: %w", h.ID, backend.ErrLost)
	}
	bx := &box{id: h.ID, state: st, pidfd: -1, done: make(chan struct{}), gone: make(chan struct{}), started: true}
	if !b.boxes.Reserve(h.ID, bx) {
		return nil // already attached
	}

	lost := func(reason string) error {
		if bx.pidfd >= 0 {
			unix.Close(bx.pidfd)
			bx.pidfd = -1
		}
		b.cleanup(context.WithoutCancel(ctx), st, h.ID)
		// A checkpoint a crash left half-written (a complete one is the
		// sandbox, and never reaches here while readable).
		os.RemoveAll(b.checkpoint(h.ID) + ".new")
		b.forget(bx)
		return fmt.Errorf("%s: %s: %w", h.ID, reason, backend.ErrLost)
	}
	if st.Dir != filepath.Join(b.cfg.RunDir, h.ID) {
		b.forget(bx)
		return fmt.Errorf("%s: handle names run directory %q: %w", h.ID, st.Dir, backend.ErrLost)
	}
	// Checkpointed and its run directory gone (a host reboot): rebuild it
	// from the checkpoint.
	if _, err := os.Stat(st.Dir); errors.Is(err, os.ErrNotExist) && (b.hasCheckpoint(h.ID) || b.hasFSCheckpoint(h.ID)) {
		b.forget(bx)
		if err := b.rebuild(ctx, h.ID); err != nil {
			return fmt.Errorf("%s: %w: %w", h.ID, err, backend.ErrLost)
		}
		return nil
	}
	// The run directory's handle is newer than the caller's after a pause
	// or resume (Pauser returns no handle).
	if dh, err := b.ReadHandle(h.ID); err == nil && dh.Backend == ID {
		var ds handleData
		if json.Unmarshal(dh.Data, &ds) == nil && ds.Dir == st.Dir && ds.Cgroup == st.Cgroup {
			st = ds
			bx.state = ds
		}
	}
	// Stopped with its files kept, or a stop or restart a crash
	// interrupted once the files were saved (coldrestart.go).
	if st.Kept || b.hasFSCheckpoint(h.ID) {
		if err := b.recoverKept(ctx, bx); err != nil {
			return lost(err.Error())
		}
		return nil
	}
	if st.OnDisk || b.hasCheckpoint(h.ID) {
		if err := b.recoverOnDisk(ctx, bx); err != nil {
			return lost(err.Error())
		}
		return nil
	}
	if st.Pid == 0 {
		return lost("it never started")
	}
	// A pause or snapshot the daemon's stop interrupted before its image
	// was in place (see recoverInterrupted).
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	interrupted := exists(st.pausing()) || exists(b.checkpoint(h.ID)+".new") ||
		exists(filepath.Join(st.control(), gwire.SuspendedName))
	gone := "its sandbox is no longer running"
	if interrupted {
		gone = "the daemon stopped while it was being paused and its sandbox is no longer running; the checkpoint was incomplete"
	}
	if t, err := hostproc.StartTime(st.Pid); err != nil || t != st.StartTime {
		return lost(gone)
	}
	fd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return lost(gone)
	}
	bx.pidfd = fd
	// Re-check after opening the pidfd: the pid cannot be reused now.
	if t, err := hostproc.StartTime(st.Pid); err != nil || t != st.StartTime {
		return lost(gone)
	}
	cs, err := b.runscFor(st, 1).state(ctx, h.ID)
	switch {
	case err != nil:
		return lost(err.Error())
	case cs.Pid != st.Pid || (cs.Status != "running" && cs.Status != "paused"):
		return lost("runsc reports it " + cs.Status)
	}
	if _, err := os.Stat(st.socket()); err != nil {
		return lost("its agent socket is gone")
	}
	if _, err := bx.group(); err != nil {
		return lost(err.Error())
	}
	bx.exited = make(chan struct{})
	go bx.watch(bx.pidfd, bx.exited)
	// Only a checkpoint pauses a gvisor sandbox's kernel (runsc pause), and
	// only until the sentry ends: paused here, it was interrupted too.
	if interrupted || cs.Status == "paused" {
		if err := b.recoverInterrupted(ctx, bx, cs.Status == "paused"); err != nil {
			unix.PidfdSendSignal(bx.pidfd, unix.SIGKILL, nil, 0)
			if cg, err := bx.group(); err == nil {
				cg.Kill()
			}
			select {
			case <-bx.exited:
			case <-time.After(10 * time.Second):
			}
			return lost("the daemon stopped while it was being paused, and the pause could not be undone: " + err.Error())
		}
	}
	go b.watchMemory(bx, bx.exited)
	go b.lowerMemory(bx) // a capture's raised limit, if the daemon stopped before it was lowered
	return nil
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if bx.state.Pid != 0 || bx.onDisk.Load() {
		if err := b.killSandbox(kctx, bx); err != nil {
			return fmt.Errorf("kill %s: %w", bx.id, err)
		}
	}
	if err := b.cleanup(kctx, bx.state, bx.id); err != nil {
		return fmt.Errorf("delete %s: %w", bx.id, err)
	}
	if err := b.dropCheckpoint(bx.id); err != nil {
		return fmt.Errorf("delete %s: %w", bx.id, err)
	}
	if bx.pidfd >= 0 {
		unix.Close(bx.pidfd)
		bx.pidfd = -1
	}
	b.forget(bx)
	return nil
}

// ReadHandle reads the handle a sandbox's directory recorded at start.
func (b *Backend) ReadHandle(id string) (backend.Handle, error) {
	return hostproc.ReadHandle(filepath.Join(b.cfg.RunDir, id))
}

// Orphans lists sandbox directories under the run dir that no live sandbox
// owns (for cleanup after a crash when the store lost their handles).
func (b *Backend) Orphans() ([]string, error) {
	// The backend's own names in the run directory (.runsc, the agent
	// copy) are no sandbox id: the scan skips them.
	dirs, err := b.boxes.Orphans(b.cfg.RunDir, "")
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, id := range dirs {
		if filepath.Join(b.cfg.RunDir, id) != filepath.Clean(b.cfg.CheckpointDir) {
			out = append(out, id)
			seen[id] = true
		}
	}
	// Checkpoints of sandboxes nobody owns (their run directory went with
	// a reboot), and ones being written (id.new).
	cps, _ := b.boxes.Orphans(b.cfg.CheckpointDir, ".new")
	for _, id := range cps {
		if !seen[id] {
			out = append(out, id)
			seen[id] = true
		}
	}
	return out, nil
}

// Purge frees whatever is left of sandbox id on the host when no handle for
// it can be read.
func (b *Backend) Purge(ctx context.Context, id string) error {
	return b.boxes.Purge(id, func(id string) error {
		return errors.Join(b.cleanup(ctx, handleData{Dir: filepath.Join(b.cfg.RunDir, id), Cgroup: cgroupName(id)}, id), b.dropCheckpoint(id))
	})
}
