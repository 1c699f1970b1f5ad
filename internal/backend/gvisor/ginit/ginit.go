package ginit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
)

// Run is the body of "warden-agent gvisor-init". It returns only on failure;
// its error goes to the sandbox's log on the host.
func Run() error {
	// Catch (and drop) what user code may send to PID 1. A handler, not
	// SIG_IGN: ignored dispositions would be inherited by every process the
	// agent starts.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	var ctl *control
	ctlReady := make(chan struct{})
	go func() {
		for sig := range sigs {
			select {
			case <-ctlReady:
				ctl.signal(sig)
			default:
			}
		}
	}()
	if os.Getpid() != 1 {
		return errors.New("gvisor-init must run as pid 1 of a gVisor sandbox")
	}
	cfg, err := readConfig()
	if err != nil {
		return err
	}
	if err := setupFS(cfg); err != nil {
		return err
	}
	if cfg.Agent.Sudo {
		if err := mountSudo(); err != nil {
			// No sudo then, rather than a mount through an unsafe path.
			slog.Warn("sudo unavailable", "err", err)
			cfg.Agent.Sudo = false
		}
	}
	if err := writeIdentity(cfg.Hostname, cfg.ResolvConf); err != nil {
		return err
	}
	if cfg.OpenFiles > 0 {
		lim := &unix.Rlimit{Cur: uint64(cfg.OpenFiles), Max: uint64(cfg.OpenFiles)}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, lim); err != nil {
			return fmt.Errorf("rlimit nofile: %w", err)
		}
	}
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	ctl, oomFile, err := openControlDir()
	if err != nil {
		return err
	}
	close(ctlReady)
	ln, ctlLn, wakeLn, err := ctl.listen()
	if err != nil {
		return err
	}
	if err := ctl.hide(); err != nil {
		return err
	}
	memCurrent, err := setupCgroup(cfg.Pids)
	if err != nil {
		return err
	}
	if err := hideDir(); err != nil {
		return err
	}
	// Nobody in the sandbox may ptrace the agent or read its memory, fds or
	// environment.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	if err := lockdown(cfg); err != nil {
		return err
	}
	var wd *watchdog
	if cfg.MemoryBytes > 0 {
		wd = newWatchdog(cfg.MemoryBytes, memCurrent, oomFile)
		onSuspend = wd.closeWakes
		go wd.run()
	}
	a := agent.New(cfg.Agent)
	// The agent socket serves the agent protocol only; the host-only
	// SuspendPath is on the init's own socket (see suspend.go).
	handler := a.Handler()
	slog.Info("agent serving", "hostname", cfg.Hostname)
	for {
		if wd != nil {
			go wd.accept(wakeLn)
		} else {
			wakeLn.Close()
		}
		srv := a.Server(ln, handler)
		ctlSrv := &http.Server{Handler: ctl.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
		ctl.mu.Lock()
		ctl.srv, ctl.ctlSrv, ctl.wakeLn = srv, ctlSrv, wakeLn
		ctl.mu.Unlock()
		go ctlSrv.Serve(ctlLn)
		err := srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		// Suspended for a checkpoint: wait for SIGUSR2 from the host,
		// after the restore (or after a checkpoint that failed).
		<-ctl.resume
		slog.Info("agent listening again after a suspension")
		if ln, ctlLn, wakeLn, err = ctl.listen(); err != nil {
			return err
		}
		os.Remove(ctl.path(SuspendedName)) // the backend waits for this
	}
}

// setupFS shapes the sandbox's filesystem view. runsc gives the root (the
// template under a writable overlay), /proc, a /dev of gVisor's devices, a
// sysfs and a /tmp; the init replaces what the backend contract wants
// different.
func setupFS(cfg Config) error {
	const nsx = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := mountLayers(cfg); err != nil {
		return err
	}
	// No /sys at all: an empty directory stays if the template has one.
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount /sys: %w", err)
	}
	// /dev: a small tmpfs with only the safe devices, like the native backend.
	if err := unix.Unmount("/dev", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount /dev: %w", err)
	}
	if err := mkdirNoFollow("/dev", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=65536"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := populateDev(cfg); err != nil {
		return err
	}
	// /tmp: a tmpfs of the disk limit's size (gVisor's default one has none).
	if err := unix.Unmount("/tmp", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount /tmp: %w", err)
	}
	if err := mkdirNoFollow("/tmp", os.ModeSticky|0o777); err != nil {
		return err
	}
	tmpOpts := "mode=1777"
	if cfg.TmpBytes > 0 {
		tmpOpts += ",size=" + strconv.FormatInt(cfg.TmpBytes, 10)
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := maskProc(); err != nil {
		return err
	}
	// Kernel tunables are read-only.
	if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /proc/sys: %w", err)
	}
	if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|nsx, ""); err != nil {
		return fmt.Errorf("read-only /proc/sys: %w", err)
	}
	return mountVolumes(cfg.Volumes)
}

// mountVolumes moves each volume from where the bundle bound it (under
// VolumeDir, served by the gofer: writes go straight to the host's
// filesystem, which enforces its quota) to its target, last, so that no
// overlay or tmpfs of the init covers it; missing directories on the way
// are made (never through a symlink). The mount is nosuid and nodev, and
// read-only when asked: the gofer refuses writes to a read-only volume too.
func mountVolumes(vols []Volume) error {
	for _, v := range vols {
		dst, err := mountpointAll(v.Target)
		if err != nil {
			return fmt.Errorf("volume at %s: %w", v.Target, err)
		}
		if err := unix.Mount(v.Source, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("volume at %s: move mount: %w", v.Target, err)
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
		if v.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", dst, "", flags, ""); err != nil {
			return fmt.Errorf("volume at %s: mount flags: %w", v.Target, err)
		}
	}
	return nil
}

// mountpointAll is mountpoint, creating every missing directory of target.
func mountpointAll(target string) (string, error) {
	parts := strings.Split(strings.Trim(target, "/"), "/")
	for i := range parts[:len(parts)-1] {
		if _, err := mountpoint("/" + strings.Join(parts[:i+1], "/")); err != nil {
			return "", err
		}
	}
	return mountpoint(target)
}

// mountLayers mounts an overlay at every target but "/": the target's
// read-only layers (bound at m.Lower by the bundle) under a writable layer
// in one tmpfs of cfg.UpperBytes. Then the lower mount points and the tmpfs
// are unmounted (the overlays keep their own references), so the sandbox
// sees one overlay per target, as in a native sandbox.
func mountLayers(cfg Config) error {
	if len(cfg.Mounts) == 0 {
		return nil
	}
	// A boot on a kept writable layer (a cold restart) finds the mount
	// point of the last boot.
	if err := mkdirNoFollow(UpperDir, 0o700); err != nil {
		return err
	}
	opts := "mode=0700"
	if cfg.UpperBytes > 0 {
		opts += ",size=" + strconv.FormatInt(cfg.UpperBytes, 10)
	}
	if err := unix.Mount("tmpfs", UpperDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s: %w", UpperDir, err)
	}
	for i, m := range cfg.Mounts {
		up, work := UpperDir+"/u"+strconv.Itoa(i), UpperDir+"/w"+strconv.Itoa(i)
		// The merged root takes the upper directory's owner and mode: give
		// it the lower's.
		var st unix.Stat_t
		if err := unix.Stat(m.Lower, &st); err != nil {
			return fmt.Errorf("layers of %s: %w", m.Target, err)
		}
		if err := os.Mkdir(up, 0o700); err != nil {
			return fmt.Errorf("upper dir: %w", err)
		}
		if err := os.Lchown(up, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("upper dir: %w", err)
		}
		if err := os.Chmod(up, os.FileMode(st.Mode&0o777)); err != nil {
			return fmt.Errorf("upper dir: %w", err)
		}
		if err := os.Mkdir(work, 0o700); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
		dst, err := mountpoint(m.Target)
		if err != nil {
			return err
		}
		data := "lowerdir=" + m.Lower + ",upperdir=" + up + ",workdir=" + work
		if err := unix.Mount("overlay", dst, "overlay", unix.MS_NODEV, data); err != nil {
			return fmt.Errorf("mount overlay at %s: %w", m.Target, err)
		}
	}
	for _, m := range cfg.Mounts {
		if err := unix.Unmount(m.Lower, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m.Lower, err)
		}
	}
	if err := unix.Unmount(UpperDir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", UpperDir, err)
	}
	return nil
}

// mountpoint returns target after checking that every component is a real
// directory (never a symlink the template planted), creating the last one if
// missing.
func mountpoint(target string) (string, error) {
	p := ""
	parts := strings.Split(strings.Trim(target, "/"), "/")
	for i, c := range parts {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("bad mount target %q", target)
		}
		p += "/" + c
		st, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist) && i == len(parts)-1:
			if err := os.Mkdir(p, 0o755); err != nil {
				return "", fmt.Errorf("create mount target %s: %w", target, err)
			}
		case err != nil:
			return "", fmt.Errorf("mount target %s: %w", target, err)
		case !st.IsDir():
			return "", fmt.Errorf("mount target %s is not a directory", target)
		}
	}
	return p, nil
}

// Masked procfs entries, as in native sandboxes (runc's defaults): files
// become read-only, directories an empty read-only tmpfs. gVisor's /proc has
// few of them, all emulated, but sysrq-trigger for one opens for writing.
var (
	procMaskFiles = []string{"kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "sysrq-trigger", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "config.gz"}
	procMaskDirs  = []string{"acpi", "asound", "scsi", "driver"}
)

func maskProc() error {
	for _, f := range procMaskFiles {
		p := "/proc/" + f
		if st, err := os.Lstat(p); err != nil || st.IsDir() {
			continue
		}
		// A read-only bind of the file onto itself: opening it for writing
		// fails with EROFS. (/dev/null, as in native sandboxes, would be a
		// bind of a tmpfs subtree here: /dev is a tmpfs.)
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for _, d := range procMaskDirs {
		p := "/proc/" + d
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0"); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// mkdirNoFollow makes sure p is a real directory (not a symlink the template
// planted), creating it if missing.
func mkdirNoFollow(p string, mode os.FileMode) error {
	st, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(p, mode); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		return os.Chmod(p, mode)
	case err != nil:
		return fmt.Errorf("%s: %w", p, err)
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}

// devices are the character devices of /dev: gVisor implements each of them
// itself (none reaches a host device).
var devices = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

func populateDev(cfg Config) error {
	for _, d := range devices {
		if err := unix.Mknod("/dev/"+d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("create /dev/%s: %w", d.name, err)
		}
		if err := unix.Chmod("/dev/"+d.name, 0o666); err != nil {
			return fmt.Errorf("chmod /dev/%s: %w", d.name, err)
		}
	}
	if err := os.Mkdir("/dev/pts", 0o755); err != nil {
		return fmt.Errorf("create /dev/pts: %w", err)
	}
	// No mode= or gid=: gVisor's devpts applies them to its root directory
	// (Linux: to new terminals), and a 0620 /dev/pts is one nobody without
	// capabilities can search.
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	if err := os.Mkdir("/dev/shm", 0o1777); err != nil {
		return fmt.Errorf("create /dev/shm: %w", err)
	}
	shmOpts := "mode=1777"
	if cfg.ShmBytes > 0 {
		shmOpts += ",size=" + strconv.FormatInt(cfg.ShmBytes, 10)
	}
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shmOpts); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := os.Symlink(l[0], "/dev/"+l[1]); err != nil {
			return fmt.Errorf("create /dev/%s: %w", l[1], err)
		}
	}
	// Nothing else may be created in /dev.
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("read-only /dev: %w", err)
	}
	return nil
}

// writeIdentity writes /etc/hostname and /etc/hosts into the writable layer.
func writeIdentity(hostname, resolvConf string) error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("create /etc: %w", err)
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n"
	files := map[string]string{"/etc/hostname": hostname + "\n", "/etc/hosts": hosts}
	if resolvConf != "" {
		files["/etc/resolv.conf"] = resolvConf
	}
	for name, content := range files {
		os.Remove(name)
		fd, err := unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		_, err = unix.Write(fd, []byte(content))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// hideDir mounts an empty read-only tmpfs over Dir once the init is done
// with it. Unmounting the bundle's bind mounts inside the sandbox is not
// enough: runsc's gofer binds them into its view of the root directory on
// the host side, so the root filesystem itself still shows the control
// directory and the lower layers at their mount points.
func hideDir() error {
	if err := unix.Mount("tmpfs", Dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0755"); err != nil {
		return fmt.Errorf("hide %s: %w", Dir, err)
	}
	return nil
}

// pidsCgroup is where the init mounts gVisor's cgroup2 hierarchy while it
// sets up the sandbox's group.
const pidsCgroup = Dir + "/cgroup"

// lockdown applies the restrictions, as the native init does. Every user
// process is forked from one dedicated agent thread whose own state is what
// children inherit: an empty capability bounding set (and no inheritable or
// ambient capabilities), no_new_privs. The seccomp filter
// then goes on every thread of the agent (TSYNC), so the agent itself can
// no longer mount, unshare or ptrace either. gVisor has no Landlock; its
// kernel has no host devices to reach, and signals and abstract sockets
// cannot leave the sandbox.
func lockdown(cfg Config) error {
	process.SpawnThreadSetup = func() error {
		return sbinit.DropPrivileges(cfg.RootCaps)
	}
	if err := process.PrepareSpawnThread(); err != nil {
		return err
	}
	return sbinit.InstallSeccomp(cfg.Seccomp)
}

// setupCgroup puts the agent, and so everything it starts, in a group of
// gVisor's cgroup2 hierarchy (runsc --in-sandbox-cgroup=v2) whose pids.max
// is the sandbox's task limit (0: none): gVisor's kernel refuses forks past
// it with EAGAIN. The agent's own threads count, as in a native sandbox's
// cgroup. (With runsc's default v1 hierarchies a fork is charged to one
// hierarchy picked at random, so a pids limit there only held now and then;
// the single v2 hierarchy does not have that problem.) It returns the root
// group's memory.current, which the memory watchdog reads: gVisor's exact,
// unthrottled account of the sandbox's memory. The hierarchy is unmounted
// again: nothing in the sandbox can see or change the limit.
func setupCgroup(pids int64) (*os.File, error) {
	if err := mkdirNoFollow(pidsCgroup, 0o700); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	defer os.Remove(pidsCgroup)
	if err := unix.Mount("cgroup2", pidsCgroup, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount cgroup2: %w", err)
	}
	defer unix.Unmount(pidsCgroup, unix.MNT_DETACH)
	g := pidsCgroup + "/sandbox"
	if err := os.Mkdir(g, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if pids > 0 {
		if err := os.WriteFile(g+"/pids.max", []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
			return nil, fmt.Errorf("pids limit: %w", err)
		}
	}
	if err := os.WriteFile(g+"/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return nil, fmt.Errorf("join cgroup: %w", err)
	}
	f, err := os.Open(pidsCgroup + "/memory.current")
	if err != nil {
		return nil, fmt.Errorf("memory accounting: %w", err)
	}
	return f, nil
}
