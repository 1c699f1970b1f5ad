// Package backend defines the isolation backend interface that every sandbox
// runtime (native namespaces, gVisor, microVM) implements, the data that
// describes a sandbox to a backend (Spec), and the registry wardend uses to
// find backends by name.
//
// # Contract
//
// A sandbox moves through these states:
//
//	Create ──> created ──Start──> running ──(all processes exit / Kill)──> stopped
//	                                  │                                      │
//	                                  └────────────── Delete ───────────────-┴──> (gone)
//
// Create reserves host resources (uid range, cgroup, run directory) but runs
// nothing. Start boots the sandbox and returns, once its agent accepts
// connections, the handle to store from then on. Stop asks the sandbox to end (SIGTERM to everything, then
// SIGKILL after grace); Kill ends it at once. Wait blocks until the sandbox has
// stopped. Delete frees every host resource the sandbox held; it is idempotent
// and also kills a sandbox that still runs. After Delete returns nothing of the
// sandbox is left on the host: no process, mount, cgroup, directory or device.
//
// A Handle is the serialisable identity of a sandbox on its backend. wardend
// stores it; after a daemon restart it passes it to Recover, which either
// re-attaches (the sandbox keeps running and DialAgent works again) or returns
// ErrLost after freeing whatever the sandbox still held.
//
// Optional abilities (Pauser, Restarter, Snapshotter, Eventer, PIDer, NetNSer) are
// separate interfaces, called through a type assertion; Capabilities declares
// them as data, and callers decide from it (CheckCapabilities keeps the two in
// agreement).
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Lifecycle sentinels. Backends wrap them with %w; they carry their kind
// (internal/errkind), which each API maps to its status codes in one table.
// ErrInvalidSpec is the daemon's mistake, not the caller's: it has none.
var (
	ErrNotFound     = errkind.New(errkind.NotFound, "sandbox not found")
	ErrNotRunning   = errkind.New(errkind.Conflict, "sandbox is not running")
	ErrAlreadyStart = errkind.New(errkind.Conflict, "sandbox already started")
	ErrLost         = errkind.New(errkind.Conflict, "sandbox lost")
	ErrUnsupported  = errkind.New(errkind.Unsupported, "not supported by this backend")
	ErrInvalidSpec  = errors.New("invalid sandbox spec")
)

// HandleVersion is the version of the Handle layout written by this build.
const HandleVersion = 1

// Handle identifies a sandbox on a backend and carries what the backend needs
// to re-attach after a daemon restart. Data is backend-private JSON.
type Handle struct {
	Version int             `json:"version"`
	Backend string          `json:"backend"`
	ID      string          `json:"id"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Layer is one read-only directory tree of a template, mounted at Target in the
// sandbox. Several layers with the same Target stack, the first on top.
type Layer struct {
	Target string `json:"target"` // absolute path inside the sandbox, "/" for the root
	Path   string `json:"path"`   // host directory holding the tree
}

// Limits bounds what a sandbox may use. Zero means the backend default.
type Limits struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`   // CPU quota in thousandths of a core (1000 = one core)
	MemoryBytes int64 `json:"memory_bytes,omitempty"` // memory including swap
	DiskBytes   int64 `json:"disk_bytes,omitempty"`   // writable layer size
	Pids        int64 `json:"pids,omitempty"`         // max tasks (processes and threads)
	OpenFiles   int64 `json:"open_files,omitempty"`   // RLIMIT_NOFILE per process
}

// Defaults applied by backends when a limit is zero.
var DefaultLimits = Limits{
	CPUMillis:   1000,
	MemoryBytes: 512 << 20,
	DiskBytes:   1 << 30,
	Pids:        512,
	OpenFiles:   4096,
}

// WithDefaults returns l with zero fields taken from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.CPUMillis > 0 {
		d.CPUMillis = l.CPUMillis
	}
	if l.MemoryBytes > 0 {
		d.MemoryBytes = l.MemoryBytes
	}
	if l.DiskBytes > 0 {
		d.DiskBytes = l.DiskBytes
	}
	if l.Pids > 0 {
		d.Pids = l.Pids
	}
	if l.OpenFiles > 0 {
		d.OpenFiles = l.OpenFiles
	}
	return d
}

// Spec describes a sandbox to create.
type Spec struct {
	ID       string            `json:"id"`       // unique, [a-z0-9-], at most 63 bytes
	Hostname string            `json:"hostname"` // defaults to ID
	Layers   []Layer           `json:"layers"`   // template rootfs; at least one with Target "/"
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`    // default user for processes and files ("user")
	Workdir  string            `json:"workdir,omitempty"` // default working directory (the user's home)
	Limits   Limits            `json:"limits"`
	// Uppers optionally names, per layer target, an empty host directory that
	// receives that target's writable layer instead of the backend's own
	// scratch space. Template builds use it to capture what a step wrote, in
	// overlayfs form (whiteouts as 0/0 character devices, opaque directories
	// marked with the user.overlay.opaque xattr), owned by in-sandbox ids.
	// Backends without Capabilities.CaptureUpper refuse a spec that sets it.
	Uppers map[string]string `json:"uppers,omitempty"`
	// RootCaps are capabilities that root processes in the sandbox keep,
	// within the sandbox's user namespace (names such as "CAP_CHOWN").
	// Empty, the default, means none: sandbox root owns root's files but
	// overrides nothing. Template builds keep a small set so package
	// managers can chown and switch users, as in a rootless image build.
	RootCaps []string `json:"root_caps,omitempty"`
	// Network asks a backend whose kernel reads its network devices at
	// boot (Capabilities.Network NetworkBeforeStart; NetNSer) for a network
	// namespace of the sandbox's own that the daemon sets up between
	// Create and Start. Backends that take a network after start ignore it.
	Network bool `json:"network,omitempty"`
	// ResolvConf, if set, is written to the sandbox's /etc/resolv.conf at
	// boot by backends that honour Network.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// Sudo lets the sandbox's processes run commands as root through its
	// agent (the agent's Config.Sudo; internal/agent/sudo). Template
	// builds leave it off.
	Sudo bool `json:"sudo,omitempty"`
	// Volumes are host directories (persistent volumes, internal/volume)
	// bound into the sandbox, nosuid and nodev, read-only if asked, with
	// their files' ids as the sandbox sees them. Backends without
	// Capabilities.Volumes refuse a spec that sets it.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// VolumeMount is a host directory bound at Target inside a sandbox.
type VolumeMount struct {
	Source   string `json:"source"` // host directory (a mounted volume)
	Target   string `json:"target"` // absolute, clean path inside the sandbox, not "/"
	ReadOnly bool   `json:"read_only,omitempty"`
}

// ValidVolumeTarget checks a path inside a sandbox that a volume may be
// mounted on: absolute, clean (no "." or ".." components, no doubled or
// trailing slash), not "/", and outside the kernel's and the runtime's
// own mounts (/proc, /sys, /dev).
func ValidVolumeTarget(p string) error {
	if p == "" || p[0] != '/' || p == "/" || len(p) > 1024 || path.Clean(p) != p {
		return fmt.Errorf("%w: volume path %q must be an absolute, clean path other than /", ErrInvalidSpec, p)
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "." || c == ".." || strings.ContainsRune(c, 0) {
			return fmt.Errorf("%w: volume path %q", ErrInvalidSpec, p)
		}
	}
	for _, r := range []string{"/proc", "/sys", "/dev"} {
		if p == r || strings.HasPrefix(p, r+"/") {
			return fmt.Errorf("%w: volume path %q is under %s", ErrInvalidSpec, p, r)
		}
	}
	return nil
}

// Validate checks the parts of a spec every backend relies on.
func (s *Spec) Validate() error {
	if s.ID == "" || len(s.ID) > 63 {
		return fmt.Errorf("%w: id must be 1 to 63 bytes", ErrInvalidSpec)
	}
	for _, c := range s.ID {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: id %q may hold only a-z, 0-9 and '-'", ErrInvalidSpec, s.ID)
		}
	}
	root := false
	for _, l := range s.Layers {
		if l.Target == "/" {
			root = true
		}
		if len(l.Target) == 0 || l.Target[0] != '/' || l.Path == "" {
			return fmt.Errorf("%w: layer %q -> %q must have an absolute target and a path", ErrInvalidSpec, l.Path, l.Target)
		}
	}
	if !root {
		return fmt.Errorf("%w: no root layer", ErrInvalidSpec)
	}
	targets := map[string]bool{}
	for _, v := range s.Volumes {
		if err := ValidVolumeTarget(v.Target); err != nil {
			return err
		}
		if v.Source == "" || v.Source[0] != '/' {
			return fmt.Errorf("%w: volume source %q must be an absolute host path", ErrInvalidSpec, v.Source)
		}
		if targets[v.Target] {
			return fmt.Errorf("%w: two volumes at %q", ErrInvalidSpec, v.Target)
		}
		targets[v.Target] = true
	}
	for t, p := range s.Uppers {
		found := false
		for _, l := range s.Layers {
			found = found || l.Target == t
		}
		if !found || p == "" || p[0] != '/' {
			return fmt.Errorf("%w: upper %q -> %q must name a layer target and an absolute path", ErrInvalidSpec, p, t)
		}
	}
	l := s.Limits
	if l.CPUMillis < 0 || l.MemoryBytes < 0 || l.DiskBytes < 0 || l.Pids < 0 || l.OpenFiles < 0 {
		return fmt.Errorf("%w: limits must not be negative", ErrInvalidSpec)
	}
	if l.MemoryBytes != 0 && l.MemoryBytes < 16<<20 {
		return fmt.Errorf("%w: memory limit below 16 MiB", ErrInvalidSpec)
	}
	if l.Pids != 0 && l.Pids < 8 {
		return fmt.Errorf("%w: pids limit below 8", ErrInvalidSpec)
	}
	return nil
}

// State is what a backend observes about a sandbox.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateStopped State = "stopped"
)

// ExitStatus says how a sandbox ended.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Usage is a resource reading. Fields a backend cannot observe are -1.
type Usage struct {
	CPUNanos    int64 `json:"cpu_nanos"`
	MemoryBytes int64 `json:"memory_bytes"`
	MemoryPeak  int64 `json:"memory_peak"`
	Pids        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
	OOMEvents   int64 `json:"oom_events"`
}

// Capabilities describes a backend as data: callers decide from it what a
// backend can do and refuse early; the optional interfaces (Pauser,
// Snapshotter, Eventer, PIDer, NetNSer) are how they then call it.
// CheckCapabilities checks the two agree.
type Capabilities struct {
	Isolation      string         `json:"isolation"`       // "namespaces", "gvisor", "kvm"
	Pause          bool           `json:"pause"`           // Pauser
	MemorySnapshot bool           `json:"memory_snapshot"` // Pause writes memory to disk and releases it
	Fork           bool           `json:"fork"`            // Snapshotter: new sandboxes from a running one's memory
	Events         bool           `json:"events"`          // Eventer: resource events such as OOM kills
	Network        NetworkSupport `json:"network"`         // how a sandbox gets a network; "" is NetworkNone
	NeedsRoot      bool           `json:"needs_root"`
	CaptureUpper   bool           `json:"capture_upper"` // honours Spec.Uppers (template builds)
	ColdRestart    bool           `json:"cold_restart"`  // Restarter: stop keeping the writable layer, boot again on it
	Volumes        bool           `json:"volumes"`       // honours Spec.Volumes (persistent volumes)
}

// NetworkSupport says how a backend's sandboxes get a network.
type NetworkSupport string

// Ways of taking a network.
const (
	// NetworkNone: loopback only.
	NetworkNone NetworkSupport = "none"
	// NetworkAfterStart: the daemon puts the link into the network
	// namespace of the running sandbox's host process (PIDer).
	NetworkAfterStart NetworkSupport = "after_start"
	// NetworkBeforeStart: the sandbox's kernel reads its network devices
	// when it boots; a spec with Network gets a namespace of its own, which
	// the daemon sets up between Create and Start (NetNSer).
	NetworkBeforeStart NetworkSupport = "before_start"
)

// Networked reports whether sandboxes of the backend can have a network.
func (c Capabilities) Networked() bool {
	return c.Network == NetworkAfterStart || c.Network == NetworkBeforeStart
}

// CheckCapabilities reports where b's Capabilities disagree with the
// optional interfaces it implements (nil when they agree).
func CheckCapabilities(b Backend) error {
	c := b.Capabilities()
	var errs []error
	agree := func(field string, declared bool, iface string, implemented bool) {
		if declared != implemented {
			errs = append(errs, fmt.Errorf("backend %s: Capabilities.%s is %v but it %s %s",
				b.ID(), field, declared, map[bool]string{true: "implements", false: "does not implement"}[implemented], iface))
		}
	}
	_, pauser := b.(Pauser)
	_, snapshotter := b.(Snapshotter)
	_, eventer := b.(Eventer)
	_, pider := b.(PIDer)
	_, netnser := b.(NetNSer)
	_, restarter := b.(Restarter)
	agree("Pause", c.Pause, "Pauser", pauser)
	agree("ColdRestart", c.ColdRestart, "Restarter", restarter)
	agree("Fork", c.Fork, "Snapshotter", snapshotter)
	agree("Events", c.Events, "Eventer", eventer)
	switch c.Network {
	case "", NetworkNone:
		agree("Network (none)", false, "PIDer", pider)
		agree("Network (none)", false, "NetNSer", netnser)
	case NetworkAfterStart:
		agree("Network (after_start)", true, "PIDer", pider)
		agree("Network (after_start)", false, "NetNSer", netnser)
	case NetworkBeforeStart:
		agree("Network (before_start)", true, "NetNSer", netnser)
		agree("Network (before_start)", false, "PIDer", pider)
	default:
		errs = append(errs, fmt.Errorf("backend %s: Capabilities.Network %q is not a known way", b.ID(), c.Network))
	}
	if c.MemorySnapshot && !c.Pause {
		errs = append(errs, fmt.Errorf("backend %s: Capabilities.MemorySnapshot without Pause", b.ID()))
	}
	return errors.Join(errs...)
}

// Backend boots and stops sandboxes. Exec and files never go through it: they
// go to the in-sandbox agent reached by DialAgent, so they behave the same on
// every backend. All methods are safe for concurrent use.
type Backend interface {
	ID() string
	Capabilities() Capabilities
	// Create reserves host resources for spec. Nothing runs yet.
	Create(ctx context.Context, spec Spec) (Handle, error)
	// Start boots the sandbox; it returns when the agent accepts connections,
	// with the handle to keep from then on (it may carry what is known only
	// once the sandbox runs, such as the native agent's pid; Recover needs it).
	Start(ctx context.Context, h Handle) (Handle, error)
	// Stop sends SIGTERM to every process, then SIGKILL after grace.
	Stop(ctx context.Context, h Handle, grace time.Duration) error
	// Kill ends every process of the sandbox at once.
	Kill(ctx context.Context, h Handle) error
	// Wait blocks until the sandbox has stopped or ctx ends.
	Wait(ctx context.Context, h Handle) (ExitStatus, error)
	Status(ctx context.Context, h Handle) (State, error)
	Usage(ctx context.Context, h Handle) (Usage, error)
	// DialAgent opens a new byte stream to the sandbox's agent.
	DialAgent(ctx context.Context, h Handle) (net.Conn, error)
	// Recover re-attaches to a sandbox after a daemon restart, or frees what
	// is left of it and returns an error wrapping ErrLost.
	Recover(ctx context.Context, h Handle) error
	// Delete kills the sandbox if needed and frees every host resource. Idempotent.
	Delete(ctx context.Context, h Handle) error
}

// Pauser is implemented by backends that can pause a sandbox.
type Pauser interface {
	Pause(ctx context.Context, h Handle) error
	Resume(ctx context.Context, h Handle) error
}

// Restarter is implemented by backends that can end a sandbox's processes
// but keep its writable layer and host resources, and boot it again on
// that layer (Capabilities.ColdRestart): E2B's filesystem-only pause.
//
// StopKeep ends every process of a running sandbox, as Kill does, and
// returns the handle to keep. From then on Status reports StateStopped,
// Wait ErrNotRunning, DialAgent ErrNotRunning; Recover re-attaches the
// sandbox still stopped (it is not lost: nothing of it was to run); Delete
// frees it. A backend refuses with ErrUnsupported, before it ends
// anything, a sandbox whose writable layer would not outlive its processes.
//
// Restart boots a sandbox stopped by StopKeep again, with its spec, on its
// kept writable layer: a cold boot (a new kernel or PID 1, no process of
// before). It returns, as Start does, the handle to keep once the agent
// accepts connections; on failure the sandbox is still stopped and kept.
type Restarter interface {
	StopKeep(ctx context.Context, h Handle) (Handle, error)
	Restart(ctx context.Context, h Handle) (Handle, error)
}

// SnapshotRef names a stored snapshot.
type SnapshotRef struct {
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Snapshotter is implemented by backends that snapshot a running sandbox's
// memory and files and start new sandboxes from a snapshot (fork).
// Snapshot leaves the source running. StartFrom starts a created sandbox
// (Create with its own id and host-side limits, and the source's template
// layers) from a snapshot instead of booting it; on failure the caller
// deletes it, as after a failed Start. DeleteSnapshot frees a snapshot;
// sandboxes started from it do not need it any more.
type Snapshotter interface {
	Snapshot(ctx context.Context, h Handle) (SnapshotRef, error)
	StartFrom(ctx context.Context, h Handle, ref SnapshotRef) (Handle, error)
	DeleteSnapshot(ctx context.Context, ref SnapshotRef) error
}

// Event is something that happened to a running sandbox that its owner and
// the audit log should hear about.
type Event struct {
	Kind   string    `json:"kind"` // "oom": the OOM killer ended a process of the sandbox
	Time   time.Time `json:"time"`
	Detail string    `json:"detail,omitempty"`
}

// Eventer is implemented by backends that report resource events. The
// channel closes when the sandbox is deleted.
type Eventer interface {
	Events(ctx context.Context, h Handle) (<-chan Event, error)
}

// PIDer is implemented by backends whose sandboxes have a host process in
// the sandbox's network namespace (native: the agent, PID 1 inside), which
// the network manager attaches the sandbox's link to
// (Capabilities.Network NetworkAfterStart).
type PIDer interface {
	PID(ctx context.Context, h Handle) (int, error)
}

// NetNSer is implemented by backends whose sandbox kernel reads its network
// devices when it boots (gvisor; Capabilities.Network NetworkBeforeStart): a
// sandbox created with Spec.Network has a network namespace of its own,
// which the network manager sets up between Create and Start. NetNS returns
// it (an fd the caller owns), or an error for a sandbox created without one.
type NetNSer interface {
	NetNS(ctx context.Context, h Handle) (*os.File, error)
}
