//go:build linux && amd64

package seccomp

// Kernel tests (x86_64, like the policy): the test binary re-executes itself as a helper process
// (selected by helperEnv), which optionally installs the filter and then
// tries forbidden and ordinary things, reporting JSON on stdout. Each test
// runs the helper twice: "baseline" without the filter, to show that a probe
// really would have worked (the helper runs as root), and "filtered".

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/creack/pty"
	"github.com/warden-sandbox/warden/internal/isolation/caps"
	"golang.org/x/sys/unix"
)

const (
	helperEnv = "WARDEN_SECCOMP_TEST_HELPER" // baseline | filtered | int80
	dirEnv    = "WARDEN_SECCOMP_TEST_DIR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

type probeResult struct {
	OK     bool   `json:"ok"`
	Errno  string `json:"errno,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func resultOf(err error) probeResult {
	if err == nil {
		return probeResult{OK: true}
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return probeResult{Errno: unix.ErrnoName(errno), Detail: err.Error()}
	}
	return probeResult{Detail: err.Error()}
}

func (r probeResult) String() string {
	switch {
	case r.OK:
		return "ok"
	case r.Errno != "":
		return r.Errno + " (" + r.Detail + ")"
	default:
		return "failed: " + r.Detail
	}
}

type threadState struct {
	Tid        int  `json:"tid"`
	Seccomp    int  `json:"seccomp"`
	NoNewPrivs bool `json:"no_new_privs"`
}

type helperReport struct {
	Mode      string                 `json:"mode"`
	SetupErr  string                 `json:"setup_error,omitempty"`
	ApplyErr  string                 `json:"apply_error,omitempty"`
	Denials   map[string]probeResult `json:"denials"`
	Works     map[string]probeResult `json:"works"`
	Threads   []threadState          `json:"threads"`
	PerThread []probeResult          `json:"per_thread"`
	Int80     map[string]probeResult `json:"int80"`
}

// Baseline expectations for a denial probe.
const (
	baseOK      = "ok"      // without the filter the call succeeds (as root)
	baseDiffers = "differs" // without the filter it fails differently
	baseAny     = ""        // only logged (depends on kernel config)
)

type probeEnv struct {
	dir    string
	target int      // pid of a sleeping child
	tty    *os.File // a pty slave
}

type denial struct {
	name     string
	want     unix.Errno
	baseline string
	fn       func(e *probeEnv) error
}

func sys(trap uintptr, a ...uintptr) (uintptr, error) {
	var v [6]uintptr
	copy(v[:], a)
	r, _, errno := unix.Syscall6(trap, v[0], v[1], v[2], v[3], v[4], v[5])
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

// sysErr is sys for probes; a returned fd is closed.
func sysErr(fd bool) func(trap uintptr, a ...uintptr) error {
	return func(trap uintptr, a ...uintptr) error {
		r, err := sys(trap, a...)
		if err == nil && fd {
			unix.Close(int(r))
		}
		return err
	}
}

var (
	call   = sysErr(false)
	callFD = sysErr(true)
)

func cstr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// onThread runs fn on a fresh OS thread that exits afterwards, for calls that
// change per-thread state when they succeed.
func onThread(fn func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ch <- fn()
	}()
	return <-ch
}

func socketProbe(domain, typ, proto int) func(*probeEnv) error {
	return func(*probeEnv) error {
		fd, err := unix.Socket(domain, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
}

func execWithFlags(flags uintptr) func(*probeEnv) error {
	return func(*probeEnv) error {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
		if flags&unix.CLONE_NEWUSER != 0 {
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
		}
		return cmd.Run()
	}
}

const (
	ethPAll        = 0x0300 // htons(ETH_P_ALL)
	sockPacket     = 10
	netlinkAud     = 9
	ioctlTIOCSTI   = 0x5412
	ioctlTIOCLNX   = 0x541c
	sysFileGetattr = 468
)

var atFDCWD = uintptr(^uint64(99)) // AT_FDCWD (-100) as a register value

var denials = []denial{
	{"mount_tmpfs", unix.EPERM, baseOK, func(e *probeEnv) error {
		target := filepath.Join(e.dir, "mnt")
		err := unix.Mount("warden-test", target, "tmpfs", 0, "size=1m")
		if err == nil {
			unix.Unmount(target, unix.MNT_DETACH)
		}
		return err
	}},
	{"umount2", unix.EPERM, baseDiffers, func(*probeEnv) error { return unix.Unmount("/nonexistent-warden", 0) }},
	{"pivot_root", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return unix.PivotRoot("/nonexistent-warden-a", "/nonexistent-warden-b")
	}},
	{"chroot", unix.EPERM, baseDiffers, func(*probeEnv) error { return unix.Chroot("/nonexistent-warden") }},
	{"unshare_user", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return onThread(func() error { return unix.Unshare(unix.CLONE_NEWUSER) })
	}},
	{"unshare_net", unix.EPERM, baseOK, func(*probeEnv) error {
		return onThread(func() error { return unix.Unshare(unix.CLONE_NEWNET) })
	}},
	{"setns", unix.EPERM, baseDiffers, func(*probeEnv) error { return unix.Setns(-1, 0) }},
	{"clone_newns", unix.EPERM, baseOK, execWithFlags(unix.CLONE_NEWNS)},
	{"clone_newuser", unix.EPERM, baseOK, execWithFlags(unix.CLONE_NEWUSER)},
	{"clone_newpid", unix.EPERM, baseOK, execWithFlags(unix.CLONE_NEWPID)},
	{"clone_newnet", unix.EPERM, baseOK, execWithFlags(unix.CLONE_NEWNET)},
	{"clone_newcgroup", unix.EPERM, baseOK, execWithFlags(unix.CLONE_NEWCGROUP)},
	{"clone3", unix.ENOSYS, baseDiffers, func(*probeEnv) error { return call(unix.SYS_CLONE3, 0, 0) }},
	{"ptrace_attach", unix.EPERM, baseOK, func(e *probeEnv) error {
		return onThread(func() error {
			if err := unix.PtraceAttach(e.target); err != nil {
				return err
			}
			var ws unix.WaitStatus
			unix.Wait4(e.target, &ws, unix.WALL, nil)
			return unix.PtraceDetach(e.target)
		})
	}},
	{"process_vm_readv", unix.EPERM, baseDiffers, func(e *probeEnv) error {
		buf := make([]byte, 8)
		local := []unix.Iovec{{Base: &buf[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: 0x1000, Len: 8}}
		_, err := unix.ProcessVMReadv(e.target, local, remote, 0)
		return err
	}},
	{"process_vm_writev", unix.EPERM, baseDiffers, func(e *probeEnv) error {
		buf := make([]byte, 8)
		local := []unix.Iovec{{Base: &buf[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: 0x1000, Len: 8}}
		_, err := unix.ProcessVMWritev(e.target, local, remote, 0)
		return err
	}},
	{"kcmp", unix.EPERM, baseAny, func(e *probeEnv) error {
		return call(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(e.target), 0 /* KCMP_FILE */, 0, 0)
	}},
	{"pidfd_getfd", unix.EPERM, baseDiffers, func(*probeEnv) error { return callFD(unix.SYS_PIDFD_GETFD, ^uintptr(0), 0, 0) }},
	{"socket_af_packet_raw", unix.EPERM, baseOK, socketProbe(unix.AF_PACKET, unix.SOCK_RAW, ethPAll)},
	{"socket_af_packet_dgram", unix.EPERM, baseOK, socketProbe(unix.AF_PACKET, unix.SOCK_DGRAM, ethPAll)},
	{"socket_inet_raw", unix.EPERM, baseOK, socketProbe(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)},
	{"socket_inet_raw_cloexec", unix.EPERM, baseOK, socketProbe(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)},
	{"socket_inet6_raw", unix.EPERM, baseOK, socketProbe(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6)},
	{"socket_inet_sock_packet", unix.EPERM, baseOK, socketProbe(unix.AF_INET, sockPacket, ethPAll)},
	{"socket_netlink_audit", unix.EPROTONOSUPPORT, baseOK, socketProbe(unix.AF_NETLINK, unix.SOCK_RAW, netlinkAud)},
	{"socket_netlink_uevent", unix.EPERM, baseOK, socketProbe(unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT)},
	{"socket_sctp", unix.EPERM, baseAny, socketProbe(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP)},
	{"socket_vsock", unix.EPERM, baseAny, socketProbe(unix.AF_VSOCK, unix.SOCK_STREAM, 0)},
	{"socket_alg", unix.EPERM, baseAny, socketProbe(unix.AF_ALG, unix.SOCK_SEQPACKET, 0)},
	{"ioctl_tiocsti", unix.EPERM, baseOK, func(e *probeEnv) error {
		c := byte('#')
		return call(unix.SYS_IOCTL, e.tty.Fd(), ioctlTIOCSTI, uintptr(unsafe.Pointer(&c)))
	}},
	{"ioctl_tiocsti_high_bits", unix.EPERM, baseOK, func(e *probeEnv) error {
		c := byte('#')
		return call(unix.SYS_IOCTL, e.tty.Fd(), 0xdead<<32|ioctlTIOCSTI, uintptr(unsafe.Pointer(&c)))
	}},
	{"ioctl_tioclinux", unix.EPERM, baseDiffers, func(e *probeEnv) error {
		sub := byte(6) // TIOCL_GETSHIFTSTATE
		return call(unix.SYS_IOCTL, e.tty.Fd(), ioctlTIOCLNX, uintptr(unsafe.Pointer(&sub)))
	}},
	{"bpf", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) }},
	{"userfaultfd", unix.EPERM, baseOK, func(*probeEnv) error { return callFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC) }},
	{"perf_event_open", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return callFD(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	}},
	{"io_uring_setup", unix.EPERM, baseAny, func(*probeEnv) error { return callFD(unix.SYS_IO_URING_SETUP, 1, 0) }},
	{"io_uring_enter", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0) }},
	{"io_uring_register", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0) }},
	{"keyctl", unix.EPERM, baseOK, func(*probeEnv) error {
		return call(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(1) /* KEY_SPEC_PROCESS_KEYRING */, 1)
	}},
	{"add_key", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) }},
	{"request_key", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_REQUEST_KEY, 0, 0, 0, 0) }},
	{"kexec_load", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }},
	{"kexec_file_load", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return call(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0xdead0000)
	}},
	{"init_module", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_INIT_MODULE, 0, 0, cstr("")) }},
	{"finit_module", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0) }},
	{"delete_module", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return call(unix.SYS_DELETE_MODULE, cstr("warden_no_such_module"), unix.O_NONBLOCK)
	}},
	// Wrong magic numbers: without the filter the kernel answers EINVAL.
	{"reboot", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_REBOOT, 0, 0, 0, 0) }},
	{"swapon", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_SWAPON, cstr("/nonexistent-warden"), 0) }},
	{"swapoff", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_SWAPOFF, cstr("/nonexistent-warden")) }},
	{"syslog", unix.EPERM, baseOK, func(*probeEnv) error { return call(unix.SYS_SYSLOG, 10 /* SIZE_BUFFER */, 0, 0) }},
	// settimeofday(NULL, NULL) changes nothing; clock_settime(NULL) faults.
	{"settimeofday", unix.EPERM, baseOK, func(*probeEnv) error { return call(unix.SYS_SETTIMEOFDAY, 0, 0) }},
	{"clock_settime", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, 0) }},
	{"clock_adjtime_read", unix.EPERM, baseOK, func(*probeEnv) error {
		var tx unix.Timex
		return call(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&tx)))
	}},
	{"adjtimex_read", unix.EPERM, baseOK, func(*probeEnv) error {
		var tx unix.Timex
		return call(unix.SYS_ADJTIMEX, uintptr(unsafe.Pointer(&tx)))
	}},
	{"acct", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_ACCT, 1) }},
	{"quotactl", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_QUOTACTL, 0, 0, 0, 0) }},
	{"open_by_handle_at", unix.EPERM, baseDiffers, func(*probeEnv) error { return callFD(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0) }},
	{"name_to_handle_at", unix.EPERM, baseDiffers, func(*probeEnv) error {
		var mnt int32
		return call(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, cstr("/"), 0, uintptr(unsafe.Pointer(&mnt)), 0)
	}},
	{"fanotify_init", unix.EPERM, baseDiffers, func(*probeEnv) error { return callFD(unix.SYS_FANOTIFY_INIT, 0xffffffff, 0) }},
	{"lookup_dcookie", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0) }},
	// The helper has no controlling terminal (setsid), so vhangup is a no-op.
	{"vhangup", unix.EPERM, baseOK, func(*probeEnv) error { return call(unix.SYS_VHANGUP) }},
	{"iopl", unix.EPERM, baseDiffers, func(*probeEnv) error { return onThread(func() error { return call(unix.SYS_IOPL, 0) }) }},
	{"ioperm", unix.EPERM, baseDiffers, func(*probeEnv) error { return onThread(func() error { return call(unix.SYS_IOPERM, 0, 0, 0) }) }},
	{"modify_ldt", unix.EPERM, baseOK, func(*probeEnv) error {
		var buf [16]byte
		return call(unix.SYS_MODIFY_LDT, 0, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	}},
	// Names longer than 64 bytes: EINVAL without the filter.
	{"sethostname", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_SETHOSTNAME, cstr(strings.Repeat("x", 65)), 65) }},
	{"setdomainname", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return call(unix.SYS_SETDOMAINNAME, cstr(strings.Repeat("x", 65)), 65)
	}},
	{"personality_addr_no_randomize", unix.EPERM, baseOK, func(*probeEnv) error {
		return onThread(func() error { return call(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */) })
	}},
	{"fsopen", unix.EPERM, baseOK, func(*probeEnv) error { return callFD(unix.SYS_FSOPEN, cstr("tmpfs"), unix.FSOPEN_CLOEXEC) }},
	{"fsconfig", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_FSCONFIG, ^uintptr(0), 0, 0, 0, 0) }},
	{"fsmount", unix.EPERM, baseDiffers, func(*probeEnv) error { return callFD(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0) }},
	{"fspick", unix.EPERM, baseDiffers, func(*probeEnv) error { return callFD(unix.SYS_FSPICK, ^uintptr(0), cstr(""), 0) }},
	{"open_tree", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return callFD(unix.SYS_OPEN_TREE, atFDCWD, cstr("/nonexistent-warden"), unix.OPEN_TREE_CLONE)
	}},
	{"move_mount", unix.EPERM, baseDiffers, func(*probeEnv) error {
		return call(unix.SYS_MOVE_MOUNT, ^uintptr(0), cstr(""), ^uintptr(0), cstr(""), 0)
	}},
	{"mount_setattr", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_MOUNT_SETATTR, ^uintptr(0), cstr(""), 0, 0, 0) }},
	{"process_madvise", unix.EPERM, baseDiffers, func(*probeEnv) error { return call(unix.SYS_PROCESS_MADVISE, ^uintptr(0), 0, 0, 0, 0) }},
	{"x32_getpid", unix.ENOSYS, baseAny, func(*probeEnv) error { return call(unix.SYS_GETPID | 0x40000000) }},
	{"newer_than_policy_file_getattr", unix.ENOSYS, baseAny, func(*probeEnv) error {
		return call(sysFileGetattr, ^uintptr(0), 0, 0, 0, 0)
	}},
}

// works are ordinary things that must keep working under the filter.
var works = []struct {
	name string
	fn   func(e *probeEnv) error
}{
	{"exec_sh_echo", func(*probeEnv) error { return expectOutput(exec.Command("/bin/sh", "-c", "echo ok"), "ok\n") }},
	{"exec_bash_pipeline", func(*probeEnv) error {
		return expectOutput(exec.Command("bash", "-c", "seq 1 100 | sort -rn | head -1"), "100\n")
	}},
	{"exec_as_uid_1000", func(*probeEnv) error {
		cmd := exec.Command("/usr/bin/id", "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		return expectOutput(cmd, "1000\n")
	}},
	{"exec_setsid_setctty_pty", func(*probeEnv) error {
		ptmx, err := pty.Start(exec.Command("/bin/sh", "-c", "tty; echo pty-ok"))
		if err != nil {
			return err
		}
		defer ptmx.Close()
		out, _ := io.ReadAll(ptmx) // ends with EIO when the child exits
		if !strings.Contains(string(out), "/dev/pts/") || !strings.Contains(string(out), "pty-ok") {
			return fmt.Errorf("unexpected pty output %q", out)
		}
		return nil
	}},
	{"goroutines_and_threads", func(*probeEnv) error {
		// Many goroutines plus goroutines blocked in syscalls on locked
		// threads, which makes the runtime clone new threads under the filter.
		var wg sync.WaitGroup
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		for range 16 {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var b [1]byte
				syscall.Read(int(r.Fd()), b[:])
			})
		}
		sum := make(chan int, 2000)
		for i := range 2000 {
			wg.Go(func() {
				buf := make([]byte, 4096)
				buf[0] = byte(i)
				runtime.Gosched()
				sum <- int(buf[0])
			})
		}
		runtime.GC()
		w.Write(make([]byte, 16))
		w.Close()
		wg.Wait()
		if len(sum) != 2000 {
			return fmt.Errorf("only %d goroutines finished", len(sum))
		}
		return nil
	}},
	{"pipe", func(*probeEnv) error {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		go func() { w.Write([]byte("pipe-ok")); w.Close() }()
		b, err := io.ReadAll(r)
		if err != nil || string(b) != "pipe-ok" {
			return fmt.Errorf("read %q: %v", b, err)
		}
		return nil
	}},
	{"tcp_loopback", func(*probeEnv) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				io.Copy(c, c)
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("tcp-ok"))
		b := make([]byte, 6)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "tcp-ok" {
			return fmt.Errorf("echo %q: %v", b, err)
		}
		return nil
	}},
	{"tcp6_and_udp_loopback", func(*probeEnv) error {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer pc.Close()
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("udp")); err != nil {
			return err
		}
		if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
			ln.Close()
		} else if !strings.Contains(err.Error(), "cannot assign") {
			return err
		}
		return nil
	}},
	{"unix_socket", func(e *probeEnv) error {
		ln, err := net.Listen("unix", filepath.Join(e.dir, "sock"))
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			return err
		}
		return c.Close()
	}},
	{"netlink_route", func(*probeEnv) error {
		if _, err := net.Interfaces(); err != nil {
			return err
		}
		return socketProbe(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)(nil)
	}},
	{"socket_tcp_explicit_proto", socketProbe(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)},
	{"personality_query", func(*probeEnv) error { return call(unix.SYS_PERSONALITY, 0xffffffff) }},
	{"mkfifo", func(e *probeEnv) error { return unix.Mkfifo(filepath.Join(e.dir, "fifo"), 0o600) }},
	{"python3", func(*probeEnv) error {
		if _, err := exec.LookPath("python3"); err != nil {
			return fmt.Errorf("python3 is not installed (scripts/install-deps.sh installs it), so this check cannot run: %w", err)
		}
		return expectOutput(exec.Command("python3", "-c",
			"import socket, subprocess, threading; socket.getaddrinfo('localhost', 80); "+
				"t = threading.Thread(target=lambda: None); t.start(); t.join(); "+
				"print(subprocess.run(['true']).returncode + 1)"), "1\n")
	}},
	{"node", func(e *probeEnv) error {
		if _, err := exec.LookPath("node"); err != nil {
			return fmt.Errorf("node is not installed (scripts/install-deps.sh installs it), so this check cannot run: %w", err)
		}
		f := filepath.Join(e.dir, "node.txt")
		return expectOutput(exec.Command("node", "-e",
			"const fs=require('fs'); fs.writeFileSync(process.argv[1],'node-ok'); "+
				"fs.promises.readFile(process.argv[1],'utf8').then(s=>console.log(s))", f), "node-ok\n")
	}},
	{"git", func(e *probeEnv) error {
		if _, err := exec.LookPath("git"); err != nil {
			return fmt.Errorf("git is not installed (scripts/install-deps.sh installs it), so this check cannot run: %w", err)
		}
		repo := filepath.Join(e.dir, "repo")
		return expectOutput(exec.Command("sh", "-c",
			`git init -q "$1" && cd "$1" && git -c user.email=t@t -c user.name=t commit -q --allow-empty -m x && git log --oneline | wc -l`,
			"sh", repo), "1\n")
	}},
}

func expectOutput(cmd *exec.Cmd, want string) error {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%v: %w (stderr %q)", cmd.Args, err, stderr.String())
	}
	if string(out) != want {
		return fmt.Errorf("%v: output %q, want %q (stderr %q)", cmd.Args, out, want, stderr.String())
	}
	return nil
}

// openPTY returns a pty slave, unlocked and open.
func openPTY() (*os.File, *os.File, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	return master, tty, nil
}

func helperMain(mode string) int {
	rep := helperReport{Mode: mode, Denials: map[string]probeResult{}, Works: map[string]probeResult{}}
	emit := func() int {
		json.NewEncoder(os.Stdout).Encode(rep)
		return 0
	}
	dir := os.Getenv(dirEnv)
	if mode == "int80" {
		rep.Int80 = int80Probes(dir, os.Getenv("WARDEN_INT80_TAG"))
		return emit()
	}
	// The parent started us in fresh mount and UTS namespaces; keep mount
	// probes that succeed (baseline) from propagating anywhere.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		rep.SetupErr = "make / private: " + err.Error()
		return emit()
	}
	target := exec.Command("sleep", "120")
	if err := target.Start(); err != nil {
		rep.SetupErr = "start target: " + err.Error()
		return emit()
	}
	defer target.Process.Kill()
	master, tty, err := openPTY()
	if err != nil {
		rep.SetupErr = err.Error()
		return emit()
	}
	defer master.Close()
	defer tty.Close()
	env := &probeEnv{dir: dir, target: target.Process.Pid, tty: tty}

	// Threads that exist before the filter is installed: TSYNC must cover them.
	jobs := make([]chan chan probeResult, 8)
	for i := range jobs {
		jobs[i] = make(chan chan probeResult)
		go func(in chan chan probeResult) {
			runtime.LockOSThread()
			out := <-in
			out <- resultOf(unix.Unshare(unix.CLONE_NEWNET))
		}(jobs[i])
	}

	if mode == "filtered" {
		if err := Apply(); err != nil {
			rep.ApplyErr = err.Error()
			return emit()
		}
	}
	for _, in := range jobs {
		out := make(chan probeResult)
		in <- out
		rep.PerThread = append(rep.PerThread, <-out)
	}
	for _, d := range denials {
		rep.Denials[d.name] = resultOf(d.fn(env))
	}
	for _, w := range works {
		rep.Works[w.name] = resultOf(w.fn(env))
	}
	if ths, err := caps.Threads(); err == nil {
		for _, s := range ths {
			rep.Threads = append(rep.Threads, threadState{Tid: s.Pid, Seccomp: s.Seccomp, NoNewPrivs: s.NoNewPrivs})
		}
	} else {
		rep.SetupErr = "threads: " + err.Error()
	}
	// i386 and exec inheritance: a child Go process (this test binary)
	// inherits the filter and makes int $0x80 calls.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=int80", "WARDEN_INT80_TAG="+mode)
	var out bytes.Buffer
	cmd.Stdout = &out
	runErr := cmd.Run()
	var child helperReport
	if err := json.Unmarshal(out.Bytes(), &child); err == nil {
		rep.Int80 = child.Int80
	} else {
		rep.Int80 = map[string]probeResult{"child": {Detail: fmt.Sprintf("int80 child: %v, output %q", runErr, out.String())}}
	}
	return emit()
}

func runHelper(t *testing.T, mode string) (helperReport, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: kernel seccomp tests need root (the baseline must be able to mount, ptrace and open raw sockets); CI runs them as root")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, dirEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s helper: %v\nstderr: %s", mode, err, stderr.String())
	}
	var rep helperReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s helper output: %v\n%s\nstderr: %s", mode, err, stdout.String(), stderr.String())
	}
	if rep.SetupErr != "" {
		t.Fatalf("%s helper setup: %s", mode, rep.SetupErr)
	}
	return rep, dir
}

func TestKernelFilter(t *testing.T) {
	base, baseDir := runHelper(t, "baseline")
	filt, filtDir := runHelper(t, "filtered")
	if filt.ApplyErr != "" {
		t.Fatalf("Apply: %s", filt.ApplyErr)
	}

	for _, d := range denials {
		got, b := filt.Denials[d.name], base.Denials[d.name]
		want := unix.ErrnoName(d.want)
		if got.OK || got.Errno != want {
			t.Errorf("%s under the filter: %v, want %s", d.name, got, want)
		}
		switch d.baseline {
		case baseOK:
			if !b.OK {
				t.Errorf("%s without the filter: %v, want success (otherwise the filtered result proves nothing)", d.name, b)
			}
		case baseDiffers:
			if !b.OK && b.Errno == want {
				t.Errorf("%s without the filter already fails with %s; the probe cannot tell the filter's work apart", d.name, want)
			}
		}
		t.Logf("%-32s filtered: %-8s baseline: %s", d.name, got.Errno, b)
	}

	for _, w := range works {
		if r := filt.Works[w.name]; !r.OK {
			t.Errorf("%s broke under the filter: %v", w.name, r)
		}
		if r := base.Works[w.name]; !r.OK {
			t.Errorf("%s fails even without the filter: %v", w.name, r)
		}
		t.Logf("%-32s filtered: %v", w.name, filt.Works[w.name])
	}

	if len(filt.Threads) < 2 {
		t.Errorf("expected a multi-threaded helper, saw %d threads", len(filt.Threads))
	}
	for _, th := range filt.Threads {
		if th.Seccomp != 2 || !th.NoNewPrivs {
			t.Errorf("thread %d: Seccomp %d NoNewPrivs %v, want 2 and true", th.Tid, th.Seccomp, th.NoNewPrivs)
		}
	}
	t.Logf("%d threads, all Seccomp 2 / NoNewPrivs 1", len(filt.Threads))
	for i, r := range filt.PerThread {
		if r.Errno != "EPERM" {
			t.Errorf("pre-existing thread %d: unshare(CLONE_NEWNET) = %v, want EPERM", i, r)
		}
	}
	for i, r := range base.PerThread {
		if !r.OK {
			t.Errorf("pre-existing thread %d without the filter: unshare(CLONE_NEWNET) = %v, want success", i, r)
		}
	}
	checkInt80(t, base, filt, baseDir, filtDir)
}
