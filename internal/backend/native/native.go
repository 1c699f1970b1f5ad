// Package native is Warden's namespace backend: each sandbox is a tree of
// processes in fresh user, pid, mount, network, uts, ipc and cgroup
// namespaces, with its own host uid range, its own cgroup, a root filesystem
// made of the template's idmapped read-only layers under a size-limited
// writable overlay, and warden-agent as its PID 1. See docs/architecture.md
// for the setup sequence.
package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/hostproc"
	"github.com/warden-sandbox/warden/internal/backend/native/nsinit/nswire"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
	"github.com/warden-sandbox/warden/internal/isolation/caps"
	"github.com/warden-sandbox/warden/internal/isolation/cgroup"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
	"github.com/warden-sandbox/warden/internal/isolation/seccomp"
)

// ID is the backend's registry name.
const ID = "native"

var _ backend.Backend = (*Backend)(nil)
var _ backend.Pauser = (*Backend)(nil)
var _ backend.Eventer = (*Backend)(nil)
var _ backend.OrphanCleaner = (*Backend)(nil)
var _ backend.Sweeper = (*Backend)(nil)
var _ backend.PIDer = (*Backend)(nil)
var _ backend.Restarter = (*Backend)(nil)

func init() {
	backend.Register(backend.Registration{
		ID:        ID,
		Required:  true, // the warm pool and template builds run on it
		Preflight: Preflight,
		New: func(p backend.Params, decode func(any) error) (backend.Backend, error) {
			c := Config{RunDir: filepath.Join(p.RunDir, ID), AgentPath: p.AgentPath,
				DiskDir: filepath.Join(p.StateDir, "disks", ID)}
			if err := decode(&c); err != nil {
				return nil, fmt.Errorf("native config: %w", err)
			}
			b, err := New(c)
			if err != nil {
				return nil, err
			}
			if medium, why := b.WritableLayer(); medium != "disk" && p.Log != nil {
				p.Log.Error("SANDBOX DISK IS MEMORY: native sandboxes' writable layers cannot go on disk here and use a tmpfs charged to their memory limit (a large upload can OOM-kill a sandbox)", "reason", why)
			}
			return b, nil
		},
	})
}

// Config configures the native backend.
type Config struct {
	// RunDir holds one directory per sandbox (agent socket, state, log).
	RunDir string `json:"run_dir" yaml:"run_dir"`
	// AgentPath is the warden-agent binary; default: next to the running
	// executable, then $PATH.
	AgentPath string `json:"agent_path" yaml:"agent_path"`
	// UIDBase is the first host uid handed to sandboxes; each sandbox gets
	// UIDRange ids from a slot of its own.
	UIDBase  uint32 `json:"uid_base" yaml:"uid_base"`
	UIDRange uint32 `json:"uid_range" yaml:"uid_range"`
	// MaxSandboxes bounds the number of uid slots.
	MaxSandboxes int `json:"max_sandboxes" yaml:"max_sandboxes"`
	// Landlock: "require", "best-effort" (default) or "off".
	Landlock string `json:"landlock" yaml:"landlock"`
	// StartTimeout bounds how long Start waits for the agent.
	StartTimeout time.Duration `json:"start_timeout" yaml:"start_timeout"`
	// DiskDir, when set, puts each sandbox's writable layer (the root
	// overlay's upper directory and /tmp) on the host's disk: a sparse ext4
	// image of the disk limit in this directory, loop-mounted on the
	// sandbox's stage directory (package diskimg). Empty, or a host that
	// cannot mount images: a tmpfs of the disk limit, whose pages count
	// against the sandbox's memory (see WritableLayer).
	DiskDir string `json:"disk_dir" yaml:"disk_dir"`
}

func (c *Config) defaults() {
	if c.RunDir == "" {
		c.RunDir = "/run/warden/native"
	}
	if c.UIDBase == 0 {
		c.UIDBase = 1 << 20
	}
	if c.UIDRange == 0 {
		c.UIDRange = 65536
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = 4096
	}
	if c.Landlock == "" {
		c.Landlock = "best-effort"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
}

// Preflight reports why this host cannot run native sandboxes.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("native backend needs root (it maps a host uid range per sandbox)")
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("user namespaces unavailable: %w", err)
	}
	if _, err := cgroup.Available(); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	return nil
}

// Backend is the native backend.
type Backend struct {
	cfg     Config
	agent   string
	seccomp []byte // the assembled filter every sandbox installs

	disk    *diskimg.Pool // nil: writable layers in memory
	diskErr error         // why disk is nil although Config.DiskDir is set

	sudo sudoSource // the source of sandboxes' sudo (sudo.go)

	boxes hostproc.Table[*box] // the live sandboxes

	mu    sync.Mutex     // guards slots; taken before boxes' own lock
	slots map[int]string // uid slot -> sandbox id
}

// box is the live state of one sandbox.
type box struct {
	id    string
	state handleData
	spec  backend.Spec

	mu      sync.Mutex // serialises Start
	started bool
	pidfd   int
	cmd     *exec.Cmd     // nil after a recovery: the agent is not our child
	cg      *cgroup.Group // the sandbox's cgroup once started (its OOM watchers close with it)

	exitOnce sync.Once
	done     chan struct{} // closed when the agent has exited
	exit     backend.ExitStatus
}

// handleData is the backend-private part of a Handle.
type handleData struct {
	Slot      int    `json:"slot"`
	UIDBase   uint32 `json:"uid_base"`
	UIDRange  uint32 `json:"uid_range"`
	Cgroup    string `json:"cgroup"`
	Dir       string `json:"dir"`
	Pid       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start_time,omitempty"` // /proc/<pid>/stat field 22, guards against pid reuse
	Disk      bool   `json:"disk,omitempty"`       // the writable layer is a disk image mounted on Dir/stage
	Kept      bool   `json:"kept,omitempty"`       // stopped by StopKeep: no process, the writable layer kept (coldrestart.go)
}

// New builds the backend.
func New(cfg Config) (*Backend, error) {
	cfg.defaults()
	switch cfg.Landlock {
	case "require", "best-effort", "off":
	default:
		return nil, fmt.Errorf("native config: landlock must be require, best-effort or off, not %q", cfg.Landlock)
	}
	agentPath, err := hostproc.FindAgent(cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	// Sandboxes exec the agent as an unprivileged host uid, so it must be
	// reachable by everyone; a root-owned read-only copy in the run
	// directory also cannot be swapped under running sandboxes.
	if agentPath, err = installAgent(agentPath, cfg.RunDir); err != nil {
		return nil, err
	}
	if err := reachableByOthers(agentPath); err != nil {
		return nil, err
	}
	// 0711: a sandbox's init (an unprivileged host uid) must traverse the run
	// directory to reach its stage directory; nobody can list it.
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	pol, err := seccomp.Load()
	if err != nil {
		return nil, err
	}
	prog, err := pol.Assemble()
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, agent: agentPath, seccomp: sbinit.EncodeProgram(prog), slots: map[int]string{}}
	if cfg.DiskDir != "" {
		if b.disk, err = diskimg.New(cfg.DiskDir); err != nil {
			b.disk, b.diskErr = nil, err
		}
	}
	if b.disk == nil {
		// Without disk images the writable layer is a tmpfs, which must
		// hold the overlay's user.* attributes (opaque directories).
		if err := tmpfsUserXattr(); err != nil {
			why := "no disk_dir is set"
			if b.diskErr != nil {
				why = "disk images are unusable: " + b.diskErr.Error()
			}
			return nil, fmt.Errorf("native: the writable layer would be in memory (%s), but %w; give sandboxes disk images (disk_dir, the daemon's default)", why, err)
		}
	}
	return b, nil
}

// WritableLayer says where sandboxes' writable layers live: "disk" (a
// size-limited image on the host's disk) or "memory" (a tmpfs charged to
// the sandbox's memory), and, for memory when disk was asked for, why.
func (b *Backend) WritableLayer() (string, error) {
	if b.disk != nil {
		return "disk", nil
	}
	return "memory", b.diskErr
}

// removeDisk unmounts and deletes sandbox id's disk image, if any.
func (b *Backend) removeDisk(id, dir string) {
	stage := filepath.Join(dir, "stage")
	if b.disk != nil {
		b.disk.Remove(id, stage)
		return
	}
	diskimg.Unmount(stage)
}

// Sweep implements backend.Sweeper: it deletes disk images no sandbox owns
// (PurgeDisks).
func (b *Backend) Sweep(context.Context) error {
	b.PurgeDisks()
	return nil
}

// PurgeDisks deletes disk images no known sandbox owns (a sandbox whose run
// directory is gone: a reboot, or a crash between the image and the
// handle). Call it after Recover.
func (b *Backend) PurgeDisks() {
	if b.disk == nil {
		return
	}
	ids, err := b.disk.Images()
	if err != nil {
		return
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(b.cfg.RunDir, id)); b.boxes.Live(id) || err == nil {
			continue
		}
		b.removeDisk(id, filepath.Join(b.cfg.RunDir, id))
	}
}

// installAgent copies the agent binary to dir/warden-agent (0555), replacing
// an older copy atomically, and returns the copy's path.
func installAgent(src, dir string) (string, error) {
	dst := filepath.Join(dir, "warden-agent")
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".warden-agent-*")
	if err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	return dst, nil
}

// reachableByOthers checks that an unprivileged uid can execute path: the
// agent is exec'd after the switch to the sandbox's own host uid range.
func reachableByOthers(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	if st.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("agent binary %s must be readable and executable by everyone (mode %v): sandboxes exec it as an unprivileged host uid", path, st.Mode().Perm())
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("agent binary %s: directory %s is not searchable by others (mode %v): sandboxes exec the agent as an unprivileged host uid", path, dir, st.Mode().Perm())
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

// ID implements backend.Backend.
func (b *Backend) ID() string { return ID }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: "namespaces", Pause: true, Events: true, Network: backend.NetworkAfterStart, NeedsRoot: true, CaptureUpper: true, ColdRestart: true, Volumes: true}
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
	spec.Limits = spec.Limits.WithDefaults()
	for _, l := range spec.Layers {
		if st, err := os.Stat(l.Path); err != nil || !st.IsDir() {
			return h, fmt.Errorf("%w: layer %s is not a directory", backend.ErrInvalidSpec, l.Path)
		}
	}
	if _, err := caps.ByName(spec.RootCaps); err != nil {
		return h, fmt.Errorf("%w: %w", backend.ErrInvalidSpec, err)
	}
	for _, p := range spec.Uppers {
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			return h, fmt.Errorf("%w: upper %s is not a directory", backend.ErrInvalidSpec, p)
		}
	}
	bx := &box{id: spec.ID, spec: spec, pidfd: -1, done: make(chan struct{})}
	b.mu.Lock()
	if !b.boxes.Reserve(spec.ID, bx) {
		b.mu.Unlock()
		return h, fmt.Errorf("%w: id %s already in use", backend.ErrInvalidSpec, spec.ID)
	}
	slot := -1
	for i := 0; i < b.cfg.MaxSandboxes; i++ {
		if _, used := b.slots[i]; !used {
			slot = i
			break
		}
	}
	if slot < 0 {
		b.boxes.Delete(spec.ID, bx)
		b.mu.Unlock()
		return h, fmt.Errorf("no free uid range: %d sandboxes already exist", b.cfg.MaxSandboxes)
	}
	b.slots[slot] = spec.ID
	b.mu.Unlock()
	defer func() {
		if err != nil {
			b.forget(bx)
		}
	}()

	dir := filepath.Join(b.cfg.RunDir, spec.ID)
	bx.state = handleData{
		Slot:     slot,
		UIDBase:  b.cfg.UIDBase + uint32(slot)*b.cfg.UIDRange,
		UIDRange: b.cfg.UIDRange,
		Cgroup:   "sb-" + spec.ID,
		Dir:      dir,
	}
	b.removeDisk(spec.ID, dir) // a stale directory from a crashed run
	os.RemoveAll(dir)
	stage := filepath.Join(dir, "stage")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return h, fmt.Errorf("create sandbox dir: %w", err)
	}
	// The init mounts its writable layer on stage as the sandbox's root.
	if err := os.Chmod(dir, 0o711); err != nil {
		return h, fmt.Errorf("create sandbox dir: %w", err)
	}
	if err := os.Chown(stage, int(bx.state.UIDBase), int(bx.state.UIDBase)); err != nil {
		return h, fmt.Errorf("create sandbox dir: %w", err)
	}
	if err := saveSpec(dir, spec); err != nil { // a cold restart boots it again (coldrestart.go)
		os.RemoveAll(dir)
		return h, err
	}
	l := spec.Limits
	if b.disk != nil {
		if err := b.disk.Mount(spec.ID, l.DiskBytes, stage, int(bx.state.UIDBase)); err != nil {
			os.RemoveAll(dir)
			return h, fmt.Errorf("writable layer: %w", err)
		}
		bx.state.Disk = true
	}
	cg, err := cgroup.Create(bx.state.Cgroup, cgroup.Limits{CPUMillis: l.CPUMillis, MemoryBytes: l.MemoryBytes, Pids: l.Pids})
	if err != nil {
		b.removeDisk(spec.ID, dir)
		os.RemoveAll(dir)
		return h, fmt.Errorf("create cgroup: %w", err)
	}
	bx.cg = cg
	return b.handle(bx), nil
}

// forget drops a box and releases its slot and host resources.
func (b *Backend) forget(bx *box) {
	if cg, err := bx.group(); err == nil {
		cg.Delete()
	}
	if bx.state.Dir != "" {
		b.removeDisk(bx.id, bx.state.Dir)
		os.RemoveAll(bx.state.Dir)
	}
	b.mu.Lock()
	b.boxes.Delete(bx.id, bx)
	if id, ok := b.slots[bx.state.Slot]; ok && id == bx.id {
		delete(b.slots, bx.state.Slot)
	}
	b.mu.Unlock()
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.started {
		return h, fmt.Errorf("%s: %w", bx.id, backend.ErrAlreadyStart)
	}
	if err := b.start(ctx, bx); err != nil {
		return h, err
	}
	return b.handle(bx), nil
}

// start boots bx; the caller holds bx.mu.
func (b *Backend) start(ctx context.Context, bx *box) (err error) {
	bx.started = true
	spec := bx.spec
	st := &bx.state

	// The agent's listener lives on the host; only its fd enters the sandbox.
	sock := filepath.Join(st.Dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("agent socket: %w", err)
	}
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	defer lnFile.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync socket: %w", err)
	}
	parentF, childF := os.NewFile(uintptr(pair[0]), "sync"), os.NewFile(uintptr(pair[1]), "sync-child")
	defer parentF.Close()
	defer childF.Close()
	logf, err := os.OpenFile(filepath.Join(st.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer logf.Close()

	cmd := exec.Command(b.agent, "init")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{childF, lnFile} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
			unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(st.UIDBase), Size: int(st.UIDRange)}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(st.UIDBase), Size: int(st.UIDRange)}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Setsid:                     true,
	}
	// The sandbox's user namespace is owned by the first uid of its own
	// range, so its kernel per-user counts are its own (see userns.go).
	if err := startOwned(cmd, st.UIDBase); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	childF.Close()
	pid := cmd.Process.Pid
	bx.cmd = cmd
	go func() {
		err := cmd.Wait()
		es := exitStatusOf(cmd.ProcessState, err)
		if es.Signal == int(syscall.SIGKILL) {
			// Killed, not by Kill (the manager records its own reason
			// then): the OOM killer's work if the cgroup counted a kill.
			if s, err := bx.cg.Stats(); err == nil && s.OOMEvents > 0 {
				es.Reason = fmt.Sprintf("out of memory: the OOM killer ended the sandbox's agent at its memory limit (%d MiB)", spec.Limits.MemoryBytes>>20)
			}
		}
		bx.finish(es)
	}()
	defer func() {
		if err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			<-bx.done
		}
	}()
	if st.StartTime, err = hostproc.StartTime(pid); err != nil {
		return err
	}
	st.Pid = pid
	if bx.pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	if err := bx.cg.AddProc(pid); err != nil {
		return fmt.Errorf("enter cgroup: %w", err)
	}
	// Idmapped template layers: host uid 0 appears as this sandbox's root.
	fds, err := idmappedLayers(pid, spec.Layers)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if err != nil {
		return err
	}
	layers := make([]nswire.Layer, len(spec.Layers))
	for i, l := range spec.Layers {
		layers[i] = nswire.Layer{Target: l.Target, Fd: i}
	}
	// Captured writable layers (template builds): writable idmapped mounts,
	// so what the sandbox writes lands on disk with in-sandbox ids.
	var uppers []nswire.Layer
	for _, t := range slices.Sorted(maps.Keys(spec.Uppers)) {
		fd, err := idmappedTree(pid, spec.Uppers[t], false)
		if err != nil {
			return err
		}
		uppers = append(uppers, nswire.Layer{Target: t, Fd: len(fds)})
		fds = append(fds, fd)
	}
	// sudo: the agent binary, bound read-only at /usr/local/bin/sudo by the
	// init (sudo.go); without it the sandbox goes without sudo, logged.
	var sudoFd *int
	if spec.Sudo {
		if fd, err := b.sudoMount(); err != nil {
			fmt.Fprintf(logf, "sudo unavailable: %v\n", err)
		} else {
			sudoFd = new(int)
			*sudoFd = len(fds)
			fds = append(fds, fd)
		}
	}
	// Volumes: idmapped like the layers, so their files keep the ids the
	// sandbox sees (portable between sandboxes); nosuid, nodev, ro if asked.
	var vols []nswire.Volume
	for _, v := range spec.Volumes {
		// A volume is a filesystem mounted on the host; its bare mount
		// point (after a host reboot, say) would put the sandbox's writes
		// on the host's disk, past any quota.
		if !diskimg.Mounted(v.Source) {
			return fmt.Errorf("volume at %s: %s is not mounted on the host", v.Target, v.Source)
		}
		fd, err := idmappedTree(pid, v.Source, v.ReadOnly)
		if err != nil {
			return fmt.Errorf("volume at %s: %w", v.Target, err)
		}
		vols = append(vols, nswire.Volume{Target: v.Target, Fd: len(fds), ReadOnly: v.ReadOnly})
		fds = append(fds, fd)
	}
	rootCaps, err := caps.ByName(spec.RootCaps)
	if err != nil {
		return err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	icfg := nswire.Config{
		Hostname:  hostname,
		StageDir:  filepath.Join(st.Dir, "stage"),
		Layers:    layers,
		Uppers:    uppers,
		RootCaps:  rootCaps,
		DiskBytes: spec.Limits.DiskBytes,
		TmpBytes:  spec.Limits.DiskBytes,
		StageDisk: st.Disk,
		ShmBytes:  min(spec.Limits.MemoryBytes/2, 64<<20),
		OpenFiles: spec.Limits.OpenFiles,
		Landlock:  b.cfg.Landlock,
		Seccomp:   b.seccomp,
		SudoFd:    sudoFd,
		Volumes:   vols,
		Agent:     agentcfg.Config{DefaultUser: spec.User, DefaultWorkdir: spec.Workdir, Env: spec.Env, DiskBytes: spec.Limits.DiskBytes, Sudo: sudoFd != nil},
	}
	conn, err := net.FileConn(parentF)
	if err != nil {
		return fmt.Errorf("sync socket: %w", err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if err := nswire.Send(uc, icfg, fds); err != nil {
		return err
	}
	deadline := time.Now().Add(b.cfg.StartTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nswire.WaitReady(uc, deadline); err != nil {
		return fmt.Errorf("start sandbox %s: %w", bx.id, err)
	}
	b.saveState(bx)
	return nil
}

func (bx *box) finish(es backend.ExitStatus) {
	bx.exitOnce.Do(func() {
		bx.exit = es
		close(bx.done)
	})
}

func exitStatusOf(ps *os.ProcessState, err error) backend.ExitStatus {
	es := backend.ExitStatus{}
	if ps == nil {
		es.Code = -1
		if err != nil {
			es.Reason = err.Error()
		}
		return es
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		es.Signal = int(ws.Signal())
		es.Code = 128 + es.Signal
		es.Reason = "agent killed by " + ws.Signal().String()
		return es
	}
	es.Code = ps.ExitCode()
	if es.Code != 0 {
		es.Reason = "agent exited with status " + strconv.Itoa(es.Code)
	}
	return es
}

// idmappedLayers returns detached, read-only, idmapped clones of each layer's
// directory, mapped through the sandbox's user namespace.
func idmappedLayers(pid int, layers []backend.Layer) ([]int, error) {
	var fds []int
	for _, l := range layers {
		fd, err := idmappedTree(pid, l.Path, true)
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// idmappedTree returns a detached clone of the mount tree at path, idmapped
// through the user namespace of pid, nosuid and nodev, read-only if asked.
func idmappedTree(pid int, path string, readonly bool) (int, error) {
	nsfd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(nsfd)
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", path, err)
	}
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(nsfd),
	}
	if readonly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmap %s: %w", path, err)
	}
	return fd, nil
}

func (b *Backend) saveState(bx *box) { hostproc.WriteHandle(bx.state.Dir, b.handle(bx)) }

// group returns the sandbox's cgroup, loading it after a recovery.
func (bx *box) group() (*cgroup.Group, error) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
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

func (bx *box) running() bool {
	select {
	case <-bx.done:
		return false
	default:
		return bx.state.Pid != 0
	}
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
	if cg, err := bx.group(); err == nil {
		if procs, err := cg.Procs(); err == nil {
			for _, p := range procs {
				if p != bx.state.Pid {
					syscall.Kill(p, syscall.SIGTERM)
				}
			}
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case <-ctx.Done():
				break wait
			case <-tick.C:
				if procs, err := cg.Procs(); err != nil || len(procs) <= 1 {
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
	if bx.pidfd >= 0 {
		// Killing PID 1 of the pid namespace kills every process in it.
		unix.PidfdSendSignal(bx.pidfd, unix.SIGKILL, nil, 0)
	}
	if cg, err := bx.group(); err == nil {
		cg.Kill()
	}
	if bx.state.Pid == 0 {
		return nil
	}
	select {
	case <-bx.done:
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
	if bx.state.Pid == 0 {
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
	if bx.state.Pid == 0 {
		return backend.StateCreated, nil
	}
	if !bx.running() {
		return backend.StateStopped, nil
	}
	if cg, err := bx.group(); err == nil {
		if frozen, err := cg.Frozen(); err == nil && frozen {
			return backend.StatePaused, nil
		}
	}
	return backend.StateRunning, nil
}

// Usage implements backend.Backend.
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
		Pids: int64(s.Pids), OOMEvents: int64(s.OOMEvents), DiskBytes: -1}
	if bx.running() {
		// The root overlay reports its upper layer, the size-limited tmpfs.
		var sf unix.Statfs_t
		if unix.Statfs(fmt.Sprintf("/proc/%d/root/", bx.state.Pid), &sf) == nil {
			u.DiskBytes = int64(sf.Blocks-sf.Bfree) * sf.Bsize
		}
	}
	return u, nil
}

// DialAgent implements backend.Backend.
func (b *Backend) DialAgent(ctx context.Context, h backend.Handle) (net.Conn, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, err
	}
	if !bx.running() {
		return nil, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(bx.state.Dir, "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	return c, nil
}

// Pause implements backend.Pauser: the cgroup is frozen; memory stays resident.
func (b *Backend) Pause(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	if !bx.running() {
		return fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	cg, err := bx.group()
	if err != nil {
		return err
	}
	if err := cg.Freeze(); err != nil {
		cg.Thaw() // never leave it half-frozen
		return fmt.Errorf("freeze: %w", err)
	}
	return nil
}

// Resume implements backend.Pauser.
func (b *Backend) Resume(ctx context.Context, h backend.Handle) error {
	bx, err := b.lookup(h)
	if err != nil {
		return err
	}
	cg, err := bx.group()
	if err != nil {
		return err
	}
	if err := cg.Thaw(); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	return nil
}

// Recover implements backend.Backend.
func (b *Backend) Recover(ctx context.Context, h backend.Handle) error {
	var st handleData
	if h.Backend != ID || h.Version != backend.HandleVersion || json.Unmarshal(h.Data, &st) != nil {
		return fmt.Errorf("%s: unreadable handle: %w", h.ID, backend.ErrLost)
	}
	st = keptState(st) // coldrestart.go
	bx := &box{id: h.ID, state: st, pidfd: -1, done: make(chan struct{}), started: true}
	b.mu.Lock()
	if b.boxes.Live(h.ID) {
		b.mu.Unlock()
		return nil // already attached
	}
	if owner, used := b.slots[st.Slot]; used && owner != h.ID {
		b.mu.Unlock()
		b.cleanupOrphan(st)
		return fmt.Errorf("%s: uid slot taken by %s: %w", h.ID, owner, backend.ErrLost)
	}
	b.slots[st.Slot] = h.ID
	b.boxes.Reserve(h.ID, bx) // b.mu keeps Create from taking h.ID meanwhile
	b.mu.Unlock()

	reason := ""
	switch {
	case st.Kept:
		return b.recoverKept(bx)
	case st.Pid == 0:
		reason = "it never started"
	default:
		if t, err := hostproc.StartTime(st.Pid); err != nil || t != st.StartTime {
			reason = "its agent is no longer running"
		} else if fd, err := unix.PidfdOpen(st.Pid, 0); err != nil {
			reason = "its agent is no longer running"
		} else {
			bx.pidfd = fd
			// Re-check after opening the pidfd: the pid cannot be reused now.
			if t, err := hostproc.StartTime(st.Pid); err != nil || t != st.StartTime {
				reason = "its agent is no longer running"
			}
		}
	}
	if reason == "" {
		if _, err := os.Stat(filepath.Join(st.Dir, "agent.sock")); err != nil {
			reason = "its agent socket is gone"
		}
	}
	if reason != "" {
		if bx.pidfd >= 0 {
			unix.PidfdSendSignal(bx.pidfd, unix.SIGKILL, nil, 0)
			unix.Close(bx.pidfd)
			bx.pidfd = -1
		}
		b.forget(bx)
		return fmt.Errorf("%s: %s: %w", h.ID, reason, backend.ErrLost)
	}
	if _, err := bx.group(); err != nil {
		b.forget(bx)
		return fmt.Errorf("%s: %v: %w", h.ID, err, backend.ErrLost)
	}
	go bx.watchPidfd()
	return nil
}

// Events implements backend.Eventer: OOM kills in the sandbox's cgroup.
func (b *Backend) Events(ctx context.Context, h backend.Handle) (<-chan backend.Event, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, err
	}
	if bx.cg == nil {
		return nil, fmt.Errorf("%s: %w", bx.id, backend.ErrNotRunning)
	}
	oom, err := bx.cg.OOMEvents()
	if err != nil {
		return nil, err
	}
	out := make(chan backend.Event, 4)
	go func() {
		defer close(out)
		for range oom {
			select {
			case out <- backend.Event{Kind: "oom", Time: time.Now(), Detail: "the OOM killer ended a process: the sandbox reached its memory limit"}:
			default: // a slow reader loses merged events; Usage has exact counts
			}
		}
	}()
	return out, nil
}

// watchPidfd waits for a recovered (non-child) agent to exit.
func (bx *box) watchPidfd() {
	fds := []unix.PollFd{{Fd: int32(bx.pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		break
	}
	bx.finish(backend.ExitStatus{Code: -1, Reason: "agent exited (status unknown: started by an earlier daemon)"})
}

func (b *Backend) cleanupOrphan(st handleData) {
	if cg, err := cgroup.Load(st.Cgroup); err == nil {
		cg.Delete()
	}
	if st.Dir != "" && strings.HasPrefix(st.Dir, b.cfg.RunDir+"/") {
		b.removeDisk(filepath.Base(st.Dir), st.Dir)
		os.RemoveAll(st.Dir)
	}
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
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.Kill(kctx, h); err != nil {
		return fmt.Errorf("kill %s: %w", bx.id, err)
	}
	if cg, err := bx.group(); err == nil {
		if err := cg.Delete(); err != nil && !errors.Is(err, cgroup.ErrNotExist) {
			return fmt.Errorf("delete cgroup of %s: %w", bx.id, err)
		}
	}
	if bx.pidfd >= 0 {
		unix.Close(bx.pidfd)
		bx.pidfd = -1
	}
	b.forget(bx)
	return nil
}

// Purge frees whatever is left of sandbox id on the host (its processes,
// cgroup and run directory) when no handle for it can be read: a crash
// between Create and the first saved handle.
func (b *Backend) Purge(_ context.Context, id string) error {
	return b.boxes.Purge(id, func(id string) error {
		b.cleanupOrphan(handleData{Cgroup: "sb-" + id, Dir: filepath.Join(b.cfg.RunDir, id)})
		// A v1 hierarchy the cgroup library does not manage (another tool,
		// or an older Warden) may hold the sandbox's cgroup too: remove it
		// where it is empty (rmdir refuses a cgroup that still has
		// processes).
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/sb-" + id)
		for _, d := range dirs {
			os.Remove(d)
		}
		return nil
	})
}

// Orphans lists sandbox directories under the run dir that no live sandbox
// owns (for cleanup after a crash when the store lost their handles).
func (b *Backend) Orphans() ([]string, error) {
	// The backend's own names there (sudo.go's .sudo-fs, the agent copy)
	// are no sandbox id: the scan skips them.
	return b.boxes.Orphans(b.cfg.RunDir, "")
}

// ReadHandle reads the handle a sandbox's directory recorded at start.
func (b *Backend) ReadHandle(id string) (backend.Handle, error) {
	return hostproc.ReadHandle(filepath.Join(b.cfg.RunDir, id))
}

// PID returns the host pid of the sandbox's agent (PID 1 inside), whose
// namespaces are the sandbox's: the network manager attaches the
// sandbox's link to its network namespace.
func (b *Backend) PID(ctx context.Context, h backend.Handle) (int, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return 0, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.state.Pid == 0 {
		return 0, fmt.Errorf("%s: %w", h.ID, backend.ErrNotRunning)
	}
	return bx.state.Pid, nil
}
