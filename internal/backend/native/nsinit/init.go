package nsinit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sudo"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
	"github.com/warden-sandbox/warden/internal/isolation/landlock"
)

// Run is the body of "warden-agent init". It returns only on failure.
func Run() error {
	// Catch (and drop) what user code may send to PID 1. A handler, not
	// SIG_IGN: ignored dispositions would be inherited by every process the
	// agent starts, and their Ctrl-C and SIGTERM would stop working.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range sigs {
		}
	}()
	cfg, fds, err := receive()
	if err != nil {
		reply("error: " + err.Error())
		return err
	}
	if err := setup(&cfg, fds); err != nil {
		reply("error: " + err.Error())
		return err
	}
	f := os.NewFile(ListenerFd, "agent-listener")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		err = fmt.Errorf("agent listener: %w", err)
		reply("error: " + err.Error())
		return err
	}
	a := agent.New(cfg.Agent)
	reply("ok")
	slog.Info("agent serving", "hostname", cfg.Hostname)
	return a.Serve(context.Background(), ln)
}

func setup(cfg *Config, fds []int) error {
	if os.Getpid() != 1 {
		return errors.New("init must run as pid 1 of a new pid namespace")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := buildRoot(*cfg, fds); err != nil {
		return err
	}
	if err := mountVolumes("root", cfg.Volumes, fds); err != nil {
		return err
	}
	if cfg.Agent.Sudo {
		if err := mountSudo("root", cfg.SudoFd, fds); err != nil {
			// No sudo then, rather than a mount through an unsafe path.
			slog.Warn("sudo unavailable", "err", err)
			cfg.Agent.Sudo = false
		}
	}
	if err := pivot(filepath.Join(cfg.StageDir, "root")); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := sbinit.LoopbackUp(); err != nil {
		return err
	}
	if err := writeIdentity(cfg.Hostname); err != nil {
		return err
	}
	if err := verifyCwd(); err != nil {
		return err
	}
	if cfg.OpenFiles > 0 {
		lim := &unix.Rlimit{Cur: uint64(cfg.OpenFiles), Max: uint64(cfg.OpenFiles)}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, lim); err != nil {
			return fmt.Errorf("rlimit nofile: %w", err)
		}
	}
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// Nobody in the sandbox may ptrace the agent or read its memory or fds.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	return lockdown(*cfg)
}

// mountSudo attaches the detached read-only mount of the agent binary at
// fds[*idx] (made by wardend) at root/usr/local/bin/sudo, on a mount point
// opened without following symlinks (sbinit.FileMountpoint): a template's
// own /usr/local/bin/sudo is covered while sudo is on.
func mountSudo(root string, idx *int, fds []int) error {
	if idx == nil || *idx < 0 || *idx >= len(fds) {
		return errors.New("no agent binary mount for sudo")
	}
	src := fds[*idx]
	defer unix.Close(src)
	target, err := sbinit.FileMountpoint(root, sudo.ShimPath)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	if err := unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", sudo.ShimPath, err)
	}
	return nil
}

// lockdown applies the restrictions. Every user process is forked from one
// dedicated agent thread whose own state is what children inherit: an empty
// capability bounding set (and no inheritable or ambient capabilities), one
// Landlock domain with signal and abstract-socket scoping, no_new_privs. The
// seccomp filter then goes on every thread of the agent (TSYNC), so the agent
// itself can no longer mount, unshare, ptrace or load kernel features either.
// Seccomp comes last: it forbids what the steps before it need.
func lockdown(cfg Config) error {
	process.SpawnThreadSetup = func() error {
		if cfg.Landlock != "off" {
			if err := landlock.RestrictThread("/"); err != nil {
				if cfg.Landlock == "require" {
					return fmt.Errorf("landlock: %w", err)
				}
				slog.Warn("landlock not enforced", "err", err)
			}
		}
		return sbinit.DropPrivileges(cfg.RootCaps)
	}
	if err := process.PrepareSpawnThread(); err != nil {
		return err
	}
	return sbinit.InstallSeccomp(cfg.Seccomp)
}

// buildRoot mounts the sandbox's root under cfg.StageDir/root.
//
//	stage (wardend's disk image, or a tmpfs; size = disk limit)
//	├── l0 l1 ...      template layers (idmapped, read-only, moved from wardend)
//	├── u0 w0 u1 w1    overlay upper and work dirs, one pair per target
//	└── root           overlay of the "/" layers: the new root
func buildRoot(cfg Config, fds []int) error {
	stage := cfg.StageDir
	if !cfg.StageDisk {
		opts := "mode=0700"
		if cfg.DiskBytes > 0 {
			opts += ",size=" + strconv.FormatInt(cfg.DiskBytes, 10)
		}
		if err := unix.Mount("warden-rw", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount writable layer: %w", err)
		}
	}
	if err := unix.Chdir(stage); err != nil {
		return fmt.Errorf("enter stage: %w", err)
	}
	// Group layers by target, keeping order; "/" first so later targets mount inside it.
	var targets []string
	byTarget := map[string][]string{}
	for i, l := range cfg.Layers {
		if l.Fd < 0 || l.Fd >= len(fds) {
			return fmt.Errorf("layer %d: bad fd index", i)
		}
		name := "l" + strconv.Itoa(i)
		if err := mkdirKept(name, 0o700); err != nil {
			return fmt.Errorf("layer dir: %w", err)
		}
		if err := unix.MoveMount(fds[l.Fd], "", unix.AT_FDCWD, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach layer %d: %w", i, err)
		}
		unix.Close(fds[l.Fd])
		t := filepath.Clean(l.Target)
		if _, ok := byTarget[t]; !ok {
			targets = append(targets, t)
		}
		byTarget[t] = append(byTarget[t], name)
	}
	if _, ok := byTarget["/"]; !ok {
		return errors.New("no root layer")
	}
	// Mount "/" first, then deeper targets.
	ordered := []string{"/"}
	for _, t := range targets {
		if t != "/" {
			ordered = append(ordered, t)
		}
	}
	if err := mkdirKept("root", 0o755); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	// Captured uppers (builds): writable host directories, attached as c<i>,
	// with the upper and work dirs inside them instead of on the tmpfs.
	captured := map[string]string{}
	for i, u := range cfg.Uppers {
		if u.Fd < 0 || u.Fd >= len(fds) {
			return fmt.Errorf("upper %d: bad fd index", i)
		}
		name := "c" + strconv.Itoa(i)
		if err := os.Mkdir(name, 0o700); err != nil {
			return fmt.Errorf("upper dir: %w", err)
		}
		if err := unix.MoveMount(fds[u.Fd], "", unix.AT_FDCWD, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach upper %d: %w", i, err)
		}
		unix.Close(fds[u.Fd])
		captured[filepath.Clean(u.Target)] = name
	}
	for i, t := range ordered {
		up, work := "u"+strconv.Itoa(i), "w"+strconv.Itoa(i)
		if c, ok := captured[t]; ok {
			up, work = c+"/upper", c+"/work"
		}
		if err := mkdirKept(up, 0o755); err != nil {
			return fmt.Errorf("upper dir: %w", err)
		}
		if err := mkdirKept(work, 0o700); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
		dst := "root"
		if t != "/" {
			var err error
			if dst, err = mountpoint("root", t); err != nil {
				return err
			}
		}
		// Relative layer paths keep host paths out of the sandbox's mountinfo.
		// userxattr: overlay metadata (opaque dirs, in layers and in the
		// upper) lives in user.overlay.*, the namespace a user namespace
		// may use; template layers are stored in that form.
		data := "lowerdir=" + strings.Join(byTarget[t], ":") + ",upperdir=" + up + ",workdir=" + work + ",userxattr"
		if err := unix.Mount("overlay", dst, "overlay", unix.MS_NODEV, data); err != nil {
			return fmt.Errorf("mount overlay at %s: %w", t, err)
		}
	}
	if err := mountSpecial("root", cfg); err != nil {
		return err
	}
	return nil
}

// mkdirKept makes directory name in the stage, or accepts the one a
// previous boot left there: a cold restart (wardend's Restarter) boots
// again on the kept disk image, whose stage keeps its layer mount points
// and the overlay's upper and work directories (the sandbox's files).
func mkdirKept(name string, mode os.FileMode) error {
	err := os.Mkdir(name, mode)
	if errors.Is(err, os.ErrExist) {
		if st, lerr := os.Lstat(name); lerr == nil && st.IsDir() {
			return nil
		}
	}
	return err
}

// mountpoint returns root+target after checking that every component below
// root is a real directory (never a symlink the image planted), creating the
// last one if missing.
func mountpoint(root, target string) (string, error) {
	p := root
	parts := strings.Split(strings.Trim(target, "/"), "/")
	for i, c := range parts {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("bad mount target %q", target)
		}
		p = p + "/" + c
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

func mountSpecial(root string, cfg Config) error {
	const nsx = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	// /proc: a fresh procfs for the new pid namespace, then masked.
	proc, err := mountpoint(root, "/proc")
	if err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", nsx, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	if err := maskProc(proc); err != nil {
		return err
	}
	// /dev: a small tmpfs with only the safe devices bound in from the host.
	dev, err := mountpoint(root, "/dev")
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=65536,nr_inodes=64"); err != nil {
		return fmt.Errorf("mount dev: %w", err)
	}
	if err := populateDev(dev, cfg); err != nil {
		return err
	}
	tmp, err := mountpoint(root, "/tmp")
	if err != nil {
		return err
	}
	if cfg.StageDisk {
		// /tmp is part of the writable layer on disk, in the same limit.
		if err := unix.Chmod(tmp, 0o1777); err != nil {
			return fmt.Errorf("/tmp: %w", err)
		}
		return nil
	}
	// /tmp (writable layer in memory): its own tmpfs.
	tmpOpts := "mode=1777"
	if cfg.TmpBytes > 0 {
		tmpOpts += ",size=" + strconv.FormatInt(cfg.TmpBytes, 10)
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("mount tmp: %w", err)
	}
	// No /sys at all: an empty directory stays if the template has one.
	return nil
}

// Masked procfs entries (runc's defaults): files get /dev/null, directories an
// empty read-only tmpfs, and kernel tunables become read-only.
var (
	procMaskFiles = []string{"kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "sysrq-trigger", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "config.gz"}
	procMaskDirs  = []string{"acpi", "asound", "scsi", "driver"}
	procReadOnly  = []string{"bus", "fs", "irq", "sys"}
)

func maskProc(proc string) error {
	for _, f := range procMaskFiles {
		p := proc + "/" + f
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := bindDevNull(p); err != nil {
			return fmt.Errorf("mask /proc/%s: %w", f, err)
		}
	}
	for _, d := range procMaskDirs {
		p := proc + "/" + d
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,nr_inodes=1"); err != nil {
			return fmt.Errorf("mask /proc/%s: %w", d, err)
		}
	}
	for _, d := range procReadOnly {
		p := proc + "/" + d
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc/%s: %w", d, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("read-only /proc/%s: %w", d, err)
		}
	}
	return nil
}

// hostDevs are bound in from the host after checking each is the expected
// character device (never trust a path an image could have replaced).
var hostDevs = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

func bindDevNull(target string) error {
	return bindDev("/dev/null", 1, 3, target)
}

func bindDev(src string, major, minor uint32, target string) error {
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
		return fmt.Errorf("%s is not the expected character device %d:%d", src, major, minor)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

func populateDev(dev string, cfg Config) error {
	for _, d := range hostDevs {
		p := dev + "/" + d.name
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return fmt.Errorf("create /dev/%s: %w", d.name, err)
		}
		unix.Close(fd)
		if err := bindDev("/dev/"+d.name, d.major, d.minor, p); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return fmt.Errorf("create /dev/pts: %w", err)
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return fmt.Errorf("create /dev/shm: %w", err)
	}
	shmOpts := "mode=1777"
	if cfg.ShmBytes > 0 {
		shmOpts += ",size=" + strconv.FormatInt(cfg.ShmBytes, 10)
	}
	if err := unix.Mount("shm", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shmOpts); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := os.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return fmt.Errorf("create /dev/%s: %w", l[1], err)
		}
	}
	// Nothing else may be created in /dev.
	if err := unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=65536,nr_inodes=64"); err != nil {
		return fmt.Errorf("read-only /dev: %w", err)
	}
	return nil
}

// pivot makes root the new "/" and detaches the old root entirely.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("enter new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// writeIdentity writes /etc/hostname and /etc/hosts inside the new root (after
// pivot_root, so a symlink in the image cannot point the write at the host).
func writeIdentity(hostname string) error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("create /etc: %w", err)
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n"
	for name, content := range map[string]string{"/etc/hostname": hostname + "\n", "/etc/hosts": hosts} {
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

// verifyCwd guards against CVE-2024-21626-style leaked directories: after the
// pivot the working directory must be reachable from the new root.
func verifyCwd() error {
	wd, err := unix.Getwd()
	if err != nil || wd != "/" {
		return fmt.Errorf("working directory outside the sandbox root (%q): %v", wd, err)
	}
	return nil
}
