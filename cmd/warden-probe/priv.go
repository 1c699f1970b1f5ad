//go:build linux

package main

// Probes 7–15: credentials, setuid, mount, namespaces, ptrace, kernel
// features, kernel administration, clock, devices.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func probeCreds(r *reporter) {
	const id = 7
	st, err := readStatus("self")
	if err != nil {
		r.fail(id, "status", describe(err))
		return
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v := st[k]
		r.check(id, k, v != "" && strings.Trim(v, "0") == "", k+" = "+v)
	}
	r.check(id, "NoNewPrivs", st["NoNewPrivs"] == "1", "NoNewPrivs = "+st["NoNewPrivs"])
	r.check(id, "Seccomp", st["Seccomp"] == "2", "Seccomp = "+st["Seccomp"])
	// Capabilities cannot be raised back.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: 1 << unix.CAP_SYS_ADMIN, Permitted: 1 << unix.CAP_SYS_ADMIN}}
	r.expect(id, "capset-raise", unix.Capset(&hdr, &data[0]), unix.EPERM)
	r.expect(id, "ambient-raise", unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_SYS_ADMIN, 0, 0), unix.EPERM)
}

// ids is what a setuid helper reports about itself.
type ids struct {
	ruid, euid, suid int
	capEff, capPrm   string
}

func statusIDs(m map[string]string) (ids, error) {
	f := strings.Fields(m["Uid"])
	if len(f) < 3 {
		return ids{}, fmt.Errorf("no Uid line")
	}
	var v ids
	v.ruid, _ = strconv.Atoi(f[0])
	v.euid, _ = strconv.Atoi(f[1])
	v.suid, _ = strconv.Atoi(f[2])
	v.capEff, v.capPrm = m["CapEff"], m["CapPrm"]
	return v, nil
}

func (v ids) String() string {
	return fmt.Sprintf("uid r/e/s %d/%d/%d, CapEff %s, CapPrm %s", v.ruid, v.euid, v.suid, v.capEff, v.capPrm)
}

// gained reports whether a process exec'd by uid me gained privilege.
func (v ids) gained(me int) bool {
	if v.euid != me || v.suid != me {
		return true
	}
	return strings.Trim(v.capEff, "0") != "" || strings.Trim(v.capPrm, "0") != ""
}

// runReportIDs is the -report-ids mode: print this process's credentials and
// keep them observable until stdin closes (at most 10 s).
func runReportIDs() int {
	st, err := readStatus("self")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	v, err := statusIDs(st)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Printf("ids %d %d %d %s %s\n", v.ruid, v.euid, v.suid, v.capEff, v.capPrm)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(budget(10 * time.Second)):
	}
	return 0
}

// execObserve starts path and reads its credentials from /proc while it
// runs (or as a zombie, before it is reaped), then kills it.
func execObserve(path string, args ...string) (ids, error) {
	cmd := exec.Command(path, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return ids{}, err
	}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return ids{}, err
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Start returns after execve succeeded: the credentials are final.
	st, err := readStatus(strconv.Itoa(cmd.Process.Pid))
	if err != nil {
		return ids{}, err
	}
	return statusIDs(st)
}

func probeSetuid(r *reporter) {
	const id = 8
	me := os.Geteuid()
	// A setuid-root copy of this program, made by the sandbox's root.
	if opts.SetuidBin == "" {
		r.skip(id, "setuid-copy", "no -setuid-bin given")
	} else if fi, err := os.Stat(opts.SetuidBin); err != nil {
		r.fail(id, "setuid-copy", "the setuid copy is missing: "+describe(err))
	} else if fi.Mode()&os.ModeSetuid == 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		r.fail(id, "setuid-copy", fmt.Sprintf("%s is not setuid root (mode %v, uid %d)", opts.SetuidBin, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid))
	} else {
		v, err := execObserve(opts.SetuidBin, "-report-ids")
		if err != nil {
			r.fail(id, "setuid-copy", "exec: "+describe(err))
		} else {
			r.check(id, "setuid-copy", !v.gained(me), fmt.Sprintf("exec of a setuid-root binary as uid %d: %s", me, v))
		}
	}
	// Setuid-root binaries of the template (the host's /usr): exec each with
	// an unknown option (harmless: usage and exit) and read its credentials.
	var tried int
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/lib/openssh", "/usr/lib/dbus-1.0", "/usr/lib/polkit-1"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode()&os.ModeSetuid == 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
				continue
			}
			if tried >= 12 {
				break
			}
			tried++
			v, err := execObserve(p, "--warden-probe-no-such-option")
			if err != nil {
				r.check(id, "setuid:"+p, isOneOf(err, unix.EACCES, unix.EPERM), "exec: "+describe(err))
				continue
			}
			r.check(id, "setuid:"+p, !v.gained(me), v.String())
		}
	}
	if tried == 0 {
		r.skip(id, "setuid-template", "the template has no setuid-root binaries")
	}
	// File capabilities cannot be set (and would be inert).
	if isRoot() {
		f, err := os.CreateTemp("/root", ".warden-probe-fcap-")
		if err == nil {
			// VFS_CAP_REVISION_2 with CAP_SYS_ADMIN permitted and effective.
			val := make([]byte, 20)
			le32(val[0:], 0x02000001)
			le32(val[4:], 1<<unix.CAP_SYS_ADMIN)
			err = unix.Fsetxattr(int(f.Fd()), "security.capability", val, 0)
			f.Close()
			os.Remove(f.Name())
		}
		r.expect(id, "file-capability", err, unix.EPERM)
	}
}

func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }

func probeMount(r *reporter) {
	const id = 9
	r.expect(id, "mount-tmpfs", unix.Mount("none", "/tmp", "tmpfs", 0, "size=1m"), unix.EPERM)
	r.expect(id, "mount-proc", unix.Mount("proc", "/tmp", "proc", 0, ""), unix.EPERM)
	r.expect(id, "mount-sysfs", unix.Mount("sysfs", "/tmp", "sysfs", 0, ""), unix.EPERM)
	r.expect(id, "mount-bind", unix.Mount("/", "/tmp", "", unix.MS_BIND|unix.MS_REC, ""), unix.EPERM)
	r.expect(id, "remount-proc-sys-rw", unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND, ""), unix.EPERM)
	r.expect(id, "umount", unix.Unmount("/dev/shm", unix.MNT_DETACH), unix.EPERM)
	r.expect(id, "pivot_root", unix.PivotRoot("/tmp", "/tmp"), unix.EPERM)
	r.expect(id, "chroot", unix.Chroot("/tmp"), unix.EPERM)
	_, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	r.expect(id, "fsopen", err, unix.EPERM, unix.ENOSYS)
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	r.expect(id, "open_tree", err, unix.EPERM, unix.ENOSYS)
	_, err = unix.Fspick(unix.AT_FDCWD, "/", unix.FSPICK_CLOEXEC)
	r.expect(id, "fspick", err, unix.EPERM, unix.ENOSYS)
	r.expect(id, "move_mount", unix.MoveMount(unix.AT_FDCWD, "/tmp", unix.AT_FDCWD, "/mnt", 0), unix.EPERM, unix.ENOSYS)
	r.expect(id, "mount_setattr", unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}), unix.EPERM, unix.ENOSYS)
}

func probeNamespaces(r *reporter) {
	const id = 10
	for _, ns := range []struct {
		name string
		flag int
	}{
		{"user", unix.CLONE_NEWUSER}, {"mnt", unix.CLONE_NEWNS}, {"net", unix.CLONE_NEWNET},
		{"pid", unix.CLONE_NEWPID}, {"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS},
		{"cgroup", unix.CLONE_NEWCGROUP}, {"time", unix.CLONE_NEWTIME},
	} {
		r.expect(id, "unshare-"+ns.name, unix.Unshare(ns.flag), unix.EPERM)
	}
	// clone(CLONE_NEWUSER) through a fork+exec of /bin/true.
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	err := cmd.Run()
	r.expect(id, "clone-newuser", err, unix.EPERM)
	cmd = exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWNS}
	r.expect(id, "clone-newnet", cmd.Run(), unix.EPERM)
	// clone3 with an impossible size: refused before the kernel reads it
	// (ENOSYS/EPERM), EINVAL would mean clone3 is reachable with flags
	// seccomp cannot inspect.
	r.expectErrno(id, "clone3", rawErr(unix.SYS_CLONE3, 0, 0), unix.ENOSYS, unix.EPERM)
	// setns into our own user namespace.
	fd, err := unix.Open("/proc/self/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.fail(id, "setns", "open /proc/self/ns/user: "+describe(err))
	} else {
		runtime.LockOSThread()
		err = unix.Setns(fd, unix.CLONE_NEWUSER)
		runtime.UnlockOSThread()
		unix.Close(fd)
		r.expect(id, "setns", err, unix.EPERM)
	}
}

func probePtrace(r *reporter) {
	const id = 11
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := unix.PtraceAttach(1)
	if err == nil {
		unix.PtraceDetach(1)
	}
	r.expect(id, "ptrace-attach-pid1", err, unix.EPERM, unix.ESRCH)
	err = unix.PtraceSeize(1)
	if err == nil {
		unix.PtraceDetach(1)
	}
	r.expect(id, "ptrace-seize-pid1", err, unix.EPERM, unix.ESRCH)
	// A process of our own: the ptrace syscall itself is refused.
	child := exec.Command("/bin/sleep", "10")
	if err := child.Start(); err != nil {
		r.fail(id, "ptrace-attach-child", "start child: "+describe(err))
	} else {
		err := unix.PtraceAttach(child.Process.Pid)
		if err == nil {
			unix.PtraceDetach(child.Process.Pid)
		}
		r.expect(id, "ptrace-attach-child", err, unix.EPERM)
		child.Process.Kill()
		child.Wait()
	}
	buf := make([]byte, 64)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: len(buf)}}
	_, err = unix.ProcessVMReadv(1, local, remote, 0)
	r.expect(id, "process_vm_readv-pid1", err, unix.EPERM, unix.ESRCH)
	_, err = unix.ProcessVMWritev(1, local, remote, 0)
	r.expect(id, "process_vm_writev-pid1", err, unix.EPERM, unix.ESRCH)
	f, err := os.Open("/proc/1/mem")
	if err == nil {
		f.Close()
	}
	r.expect(id, "proc1-mem", err, unix.EACCES, unix.EPERM)
	f, err = os.OpenFile("/proc/1/mem", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	r.expect(id, "proc1-mem-write", err, unix.EACCES, unix.EPERM)
	// pidfd_getfd steals a file descriptor; kcmp compares kernel objects.
	if pfd, err := unix.PidfdOpen(1, 0); err != nil {
		r.check(id, "pidfd_getfd-pid1", isOneOf(err, unix.EPERM, unix.ESRCH, unix.ENOSYS), "pidfd_open(1): "+describe(err))
	} else {
		_, err := unix.PidfdGetfd(pfd, 4, 0)
		unix.Close(pfd)
		r.expect(id, "pidfd_getfd-pid1", err, unix.EPERM)
	}
	r.expectErrno(id, "kcmp", rawErr(unix.SYS_KCMP, 1, uintptr(os.Getpid()), 0 /* KCMP_FILE */, 0, 0), unix.EPERM)
}

func probeKernelFeatures(r *reporter) {
	const id = 12
	attr := make([]byte, 128) // union bpf_attr, zeroed: BPF_MAP_CREATE of nothing
	r.expectErrno(id, "bpf", rawErr(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr))), unix.EPERM, unix.ENOSYS)
	r.expectErrno(id, "bpf-prog-load", rawErr(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr))), unix.EPERM, unix.ENOSYS)
	r.expectErrno(id, "userfaultfd", rawErr(unix.SYS_USERFAULTFD, unix.O_CLOEXEC), unix.EPERM, unix.ENOSYS)
	f, err := os.Open("/dev/userfaultfd")
	if err == nil {
		f.Close()
	}
	r.expect(id, "dev-userfaultfd", err, unix.ENOENT, unix.EACCES, unix.EPERM)
	pa := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	fd, err := unix.PerfEventOpen(&pa, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	r.expect(id, "perf_event_open", err, unix.EPERM, unix.ENOSYS, unix.EACCES)
	params := make([]byte, 120) // struct io_uring_params
	r.expectErrno(id, "io_uring_setup", rawErr(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0]))), unix.EPERM, unix.ENOSYS)
	_, err = unix.AddKey("user", "warden-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	r.expect(id, "add_key", err, unix.EPERM, unix.ENOSYS)
	_, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1, 0, 0)
	r.expect(id, "keyctl", err, unix.EPERM, unix.ENOSYS)
	// personality flags that weaken ASLR or allow executable data.
	r.expectErrno(id, "personality-no-aslr", rawErr(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */), unix.EPERM)
	r.expectErrno(id, "modify_ldt", rawErr(unix.SYS_MODIFY_LDT, 0, uintptr(unsafe.Pointer(&attr[0])), 16), unix.EPERM, unix.ENOSYS)
	r.expectErrno(id, "iopl", rawErr(unix.SYS_IOPL, 3), unix.EPERM, unix.ENOSYS)
	r.expectErrno(id, "ioperm", rawErr(unix.SYS_IOPERM, 0x80, 1, 1), unix.EPERM, unix.ENOSYS)
}

func probeKernelAdmin(r *reporter) {
	const id = 13
	img := []byte{0}
	r.expect(id, "init_module", unix.InitModule(img, ""), unix.EPERM)
	r.expect(id, "finit_module", unix.FinitModule(-1, "", 0), unix.EPERM)
	r.expect(id, "delete_module", unix.DeleteModule("warden_probe_no_such_module", unix.O_NONBLOCK), unix.EPERM)
	// Bad magic numbers: EPERM if refused, EINVAL if the call got through.
	r.expectErrno(id, "reboot", rawErr(unix.SYS_REBOOT, 0x12345678, 0x9abcdef0, unix.LINUX_REBOOT_CMD_CAD_OFF, 0), unix.EPERM)
	r.expectErrno(id, "kexec_load", rawErr(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000), unix.EPERM, unix.ENOSYS)
	r.expectErrno(id, "kexec_file_load", rawErr(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0xdead0000), unix.EPERM, unix.ENOSYS)
	p, _ := unix.BytePtrFromString("/warden-probe-no-such-swap")
	r.expectErrno(id, "swapon", rawErr(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0), unix.EPERM)
	r.expectErrno(id, "swapoff", rawErr(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(p))), unix.EPERM)
	_, err := unix.Klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, nil)
	r.expect(id, "syslog", err, unix.EPERM)
	_, err = unix.Klogctl(3 /* SYSLOG_ACTION_READ_ALL */, make([]byte, 256))
	r.expect(id, "syslog-read", err, unix.EPERM)
	for _, dev := range []string{"/proc/kmsg", "/dev/kmsg"} {
		f, err := os.Open(dev)
		if err == nil {
			f.Close()
		}
		r.expect(id, "open:"+dev, err, unix.EACCES, unix.EPERM, unix.ENOENT)
	}
	// A path that cannot exist and the current hostname: harmless even
	// where the call would be allowed.
	r.expect(id, "acct", unix.Acct("/warden-probe-no-such-dir/acct"), unix.EPERM)
	var u unix.Utsname
	unix.Uname(&u)
	r.expect(id, "sethostname", unix.Sethostname(u.Nodename[:len(unix.ByteSliceToString(u.Nodename[:]))]), unix.EPERM)
}

func probeClock(r *reporter) {
	const id = 14
	before := clockSkew()
	// An invalid value: EPERM if refused, EINVAL if the call got through.
	bad := unix.Timeval{Sec: 1, Usec: 2_000_000}
	r.expect(id, "settimeofday-invalid", unix.Settimeofday(&bad), unix.EPERM)
	badTS := unix.Timespec{Sec: 1, Nsec: 2_000_000_000}
	r.expectErrno(id, "clock_settime-invalid", rawErr(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&badTS))), unix.EPERM)
	// The current time: a real attempt that would change nothing visible.
	var now unix.Timeval
	unix.Gettimeofday(&now)
	r.expect(id, "settimeofday", unix.Settimeofday(&now), unix.EPERM)
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	r.expectErrno(id, "clock_settime", rawErr(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts))), unix.EPERM)
	// Set the tick to its default length (10000 us at USER_HZ 100): a change
	// request that would change nothing if it got through.
	tx := unix.Timex{Modes: unix.ADJ_TICK, Tick: 10000}
	_, err := unix.ClockAdjtime(unix.CLOCK_REALTIME, &tx)
	r.expect(id, "clock_adjtime", err, unix.EPERM)
	tx = unix.Timex{Modes: unix.ADJ_TICK, Tick: 10000}
	_, err = unix.Adjtimex(&tx)
	r.expect(id, "adjtimex", err, unix.EPERM)
	after := clockSkew()
	d := after - before
	if d < 0 {
		d = -d
	}
	r.check(id, "clock-unchanged", d < 100*time.Millisecond, fmt.Sprintf("realtime-monotonic offset moved by %s", d))
}

// clockSkew is CLOCK_REALTIME minus CLOCK_MONOTONIC.
func clockSkew() time.Duration {
	var rt, mono unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	return time.Duration(rt.Nano() - mono.Nano())
}

func probeDevices(r *reporter) {
	const id = 15
	for _, d := range []string{
		"/dev/kvm", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda", "/dev/xvda", "/dev/nvme0n1",
		"/dev/loop0", "/dev/loop-control", "/dev/mapper/control", "/dev/net/tun", "/dev/fuse", "/dev/vhost-net",
		"/dev/vhost-vsock", "/dev/vsock", "/dev/uinput", "/dev/hpet", "/dev/cpu/0/msr", "/dev/console", "/dev/tty0",
		"/dev/dri/card0", "/dev/nvidiactl", "/dev/nvidia0", "/dev/sg0", "/dev/btrfs-control", "/dev/autofs",
	} {
		f, err := os.OpenFile(d, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		} else if isOneOf(err, unix.EACCES) {
			f, err = os.Open(d)
			if err == nil {
				f.Close()
			}
		}
		r.expect(id, "open:"+d, err, unix.ENOENT, unix.EACCES, unix.EPERM, unix.ENXIO, unix.ENODEV)
	}
	// No device outside the small allow-list exists under /dev.
	allowed := map[[2]uint32]bool{{1, 3}: true, {1, 5}: true, {1, 7}: true, {1, 8}: true, {1, 9}: true, {5, 0}: true, {5, 2}: true}
	var extra []string
	filepathWalk("/dev", func(p string, st *unix.Stat_t) {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFBLK:
			extra = append(extra, fmt.Sprintf("block %s %d:%d", p, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		case unix.S_IFCHR:
			mj, mn := unix.Major(st.Rdev), unix.Minor(st.Rdev)
			if !allowed[[2]uint32{mj, mn}] && !(mj == 136 && strings.HasPrefix(p, "/dev/pts/")) {
				extra = append(extra, fmt.Sprintf("char %s %d:%d", p, mj, mn))
			}
		}
	})
	r.check(id, "dev-allowlist", len(extra) == 0, fmt.Sprintf("devices outside the allow-list: %v", extra))
	// mknod of devices fails everywhere writable.
	for _, dir := range []string{"/tmp", "/dev/shm", "/home/user", "/dev"} {
		for _, dev := range []struct {
			kind string
			mode uint32
			dev  int
		}{{"c-1-1", unix.S_IFCHR | 0o666, int(unix.Mkdev(1, 1))}, {"b-8-0", unix.S_IFBLK | 0o666, int(unix.Mkdev(8, 0))}} {
			p := filepath.Join(dir, ".warden-probe-"+dev.kind)
			err := unix.Mknod(p, dev.mode, dev.dev)
			if err == nil {
				os.Remove(p)
			}
			r.expect(id, "mknod-"+dev.kind+":"+dir, err, unix.EPERM, unix.EACCES, unix.EROFS)
		}
	}
}

// filepathWalk calls fn for every entry below root, without following links.
func filepathWalk(root string, fn func(string, *unix.Stat_t)) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			continue
		}
		fn(p, &st)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			filepathWalk(p, fn)
		}
	}
}

// readLines reads a small text file into lines.
func readLines(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}
