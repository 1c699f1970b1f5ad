//go:build linux

package landlock

// Kernel tests: the test binary re-executes itself as a helper (selected by
// helperEnv) that optionally calls Restrict("/") and then tries forbidden and
// ordinary things, reporting JSON on stdout. The test process itself is never
// restricted.

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

	"github.com/creack/pty"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

const (
	helperEnv   = "WARDEN_LANDLOCK_TEST_HELPER" // baseline | restricted | exec (then post-exec)
	dirEnv      = "WARDEN_LANDLOCK_TEST_DIR"
	abstractEnv = "WARDEN_LANDLOCK_TEST_ABSTRACT" // abstract socket owned by the test process
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

type result struct {
	OK     bool   `json:"ok"`
	Errno  string `json:"errno,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func resultOf(err error) result {
	if err == nil {
		return result{OK: true}
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return result{Errno: unix.ErrnoName(errno), Detail: err.Error()}
	}
	return result{Detail: err.Error()}
}

func (r result) String() string {
	switch {
	case r.OK:
		return "ok"
	case r.Errno != "":
		return r.Errno + " (" + r.Detail + ")"
	default:
		return "failed: " + r.Detail
	}
}

type report struct {
	Mode      string            `json:"mode"`
	Err       string            `json:"error,omitempty"`
	ABI       int               `json:"abi"`
	Probes    map[string]result `json:"probes"`
	PerThread []result          `json:"per_thread"`
}

type probe struct {
	name string
	fn   func(dir string) error
}

func mknod(path string, mode uint32, dev int) error {
	err := unix.Mknod(path, mode|0o600, dev)
	if err == nil {
		os.Remove(path)
	}
	return err
}

// ioctlTCGETS opens path and asks for terminal attributes. On /dev/null the
// driver answers ENOTTY; EACCES means Landlock refused the ioctl.
func ioctlTCGETS(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err
}

func abstractRoundTrip(name string, listen bool) error {
	if listen {
		ln, err := net.Listen("unix", "@"+name)
		if err != nil {
			return err
		}
		defer ln.Close()
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name})
}

var probes = []probe{
	// Forbidden when restricted.
	{"mknod_char", func(dir string) error { return mknod(filepath.Join(dir, "null2"), unix.S_IFCHR, int(unix.Mkdev(1, 3))) }},
	{"mknod_block", func(dir string) error { return mknod(filepath.Join(dir, "loop"), unix.S_IFBLK, int(unix.Mkdev(7, 0))) }},
	{"ioctl_dev_outside_dev", func(dir string) error { return ioctlTCGETS(filepath.Join(dir, "prenull")) }},
	{"abstract_unix_outside_domain", func(string) error { return abstractRoundTrip(os.Getenv(abstractEnv), false) }},
	{"signal_outside_domain", func(string) error { return unix.Kill(os.Getppid(), 0) }},
	{"child_inherits_mknod_denial", func(dir string) error {
		out, err := exec.Command("/bin/sh", "-c", `mknod "$1" c 1 3 && rm "$1"`, "sh", filepath.Join(dir, "null3")).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", unix.EACCES, bytes.TrimSpace(out))
		}
		return nil
	}},

	// Allowed in both modes.
	{"ioctl_dev_null", func(string) error { return ioctlTCGETS("/dev/null") }},
	{"ioctl_pty", func(string) error {
		master, tty, err := pty.Open()
		if err != nil {
			return err
		}
		defer master.Close()
		defer tty.Close()
		_, err = unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		return err
	}},
	{"regular_file_write", func(dir string) error {
		p := filepath.Join(dir, "file")
		if err := os.WriteFile(p, []byte("landlock-ok"), 0o644); err != nil {
			return err
		}
		if err := os.Truncate(p, 8); err != nil {
			return err
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "landlock" {
			return fmt.Errorf("read back %q: %v", b, err)
		}
		return nil
	}},
	{"dirs_links_rename", func(dir string) error {
		d := filepath.Join(dir, "d")
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			return err
		}
		f := filepath.Join(d, "f")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return err
		}
		if err := os.Link(f, filepath.Join(dir, "hard")); err != nil {
			return err
		}
		if err := os.Symlink(f, filepath.Join(dir, "sym")); err != nil {
			return err
		}
		if err := os.Rename(f, filepath.Join(d, "sub", "f")); err != nil { // reparenting needs "refer"
			return err
		}
		if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
			return err
		}
		return os.RemoveAll(d)
	}},
	{"unix_socket_path", func(dir string) error {
		ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
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
	{"abstract_unix_inside_domain", func(string) error {
		return abstractRoundTrip(fmt.Sprintf("warden-ll-inside-%d", os.Getpid()), true)
	}},
	{"signal_own_child", func(string) error {
		cmd := exec.Command("sleep", "10")
		if err := cmd.Start(); err != nil {
			return err
		}
		defer cmd.Wait()
		return cmd.Process.Kill()
	}},
	{"signal_children_across_threads", func(string) error {
		return acrossThreads(func(pid int) error { return unix.Kill(pid, unix.SIGKILL) })
	}},
	{"proc_exe_of_children_across_threads", func(string) error {
		return acrossThreads(func(pid int) error {
			_, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			return err
		})
	}},
	{"tcp_loopback", func(string) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Write([]byte("x"))
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 1))
		return err
	}},
	{"exec_sh", func(dir string) error {
		out, err := exec.Command("/bin/sh", "-c", `echo ok > "$1" && cat "$1"`, "sh", filepath.Join(dir, "sh.txt")).Output()
		if err != nil || string(out) != "ok\n" {
			return fmt.Errorf("output %q: %v", out, err)
		}
		return nil
	}},
	{"python3", func(string) error {
		if _, err := exec.LookPath("python3"); err != nil {
			return fmt.Errorf("python3 is not installed (scripts/install-deps.sh installs it), so this check cannot run: %w", err)
		}
		out, err := exec.Command("python3", "-c", "print(1)").Output()
		if err != nil || string(out) != "1\n" {
			return fmt.Errorf("output %q: %v", out, err)
		}
		return nil
	}},
}

// acrossThreads starts children from several OS threads and applies fn to
// each child from a different thread. With one Landlock domain per thread
// (per-thread enforcement, below ABI 8), the threads' domains are siblings:
// the signal scope then refuses such kills, and Landlock's ptrace rules refuse
// /proc/<pid>/exe and the like.
func acrossThreads(fn func(pid int) error) error {
	const n = 8
	cmds := make([]*exec.Cmd, n)
	errs := make([]error, n)
	var started, done sync.WaitGroup
	act := make(chan struct{})
	for i := range n {
		started.Add(1)
		done.Go(func() {
			runtime.LockOSThread() // n goroutines held at once: n distinct threads
			defer runtime.UnlockOSThread()
			c := exec.Command("sleep", "10")
			if err := c.Start(); err != nil {
				errs[i] = err
			} else {
				cmds[i] = c
			}
			started.Done()
			<-act
			if next := cmds[(i+1)%n]; next != nil {
				errs[i] = fn(next.Process.Pid)
			}
		})
	}
	started.Wait()
	close(act)
	done.Wait()
	for _, c := range cmds {
		if c != nil {
			c.Process.Kill()
			c.Wait()
		}
	}
	return errors.Join(errs...)
}

func helperMain(mode string) int {
	rep := report{Mode: mode, ABI: ABI(), Probes: map[string]result{}}
	emit := func() int {
		json.NewEncoder(os.Stdout).Encode(rep)
		return 0
	}
	dir := os.Getenv(dirEnv)
	// A device node made before the restriction, for the ioctl_dev probe.
	if mode != "post-exec" {
		if err := unix.Mknod(filepath.Join(dir, "prenull"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			rep.Err = "mknod prenull: " + err.Error()
			return emit()
		}
	}
	if mode == "exec" {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, helperEnv+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, helperEnv+"=post-exec")
		err := ExecRestricted("/", os.Args[0], []string{os.Args[0], "-test.run=^$"}, env)
		rep.Err = fmt.Sprintf("ExecRestricted returned: %v", err)
		return emit()
	}
	// Threads that exist before Restrict: enforcement must reach them.
	jobs := make([]chan chan result, 8)
	for i := range jobs {
		jobs[i] = make(chan chan result)
		go func(in chan chan result) {
			runtime.LockOSThread()
			out := <-in
			out <- resultOf(mknod(filepath.Join(dir, fmt.Sprintf("thread-null-%d", unix.Gettid())), unix.S_IFCHR, int(unix.Mkdev(1, 3))))
		}(jobs[i])
	}
	time.Sleep(50 * time.Millisecond)
	if mode == "restricted" {
		if err := Restrict("/"); err != nil {
			rep.Err = err.Error()
			return emit()
		}
	}
	for _, in := range jobs {
		out := make(chan result)
		in <- out
		rep.PerThread = append(rep.PerThread, <-out)
	}
	for _, p := range probes {
		rep.Probes[p.name] = resultOf(p.fn(dir))
	}
	return emit()
}

func runHelper(t *testing.T, mode, abstract string) report {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, dirEnv+"="+dir, abstractEnv+"="+abstract)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s helper: %v\nstderr: %s", mode, err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s helper output: %v\n%s", mode, err, stdout.String())
	}
	if rep.Err != "" {
		t.Fatalf("%s helper: %s", mode, rep.Err)
	}
	return rep
}

func TestABI(t *testing.T) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		if ABI() != 0 {
			t.Fatalf("ABI() = %d although the kernel has no Landlock (%v)", ABI(), err)
		}
		t.Skipf("SKIP: kernel has no Landlock: %v", err)
	}
	if ABI() != v {
		t.Fatalf("ABI() = %d, kernel says %d", ABI(), v)
	}
	t.Logf("Landlock ABI %d", v)
}

func TestRestrictRejectsBeforeEnforcing(t *testing.T) {
	// Both calls fail before anything is enforced, so they are safe in the
	// test process itself.
	if ABI() < MinABI {
		if err := Restrict("/"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Restrict on ABI %d: %v, want ErrUnavailable", ABI(), err)
		}
		t.Skipf("SKIP: Landlock ABI %d < %d; Restrict correctly refuses", ABI(), MinABI)
	}
	if err := Restrict("relative/root"); err == nil {
		t.Fatal("Restrict accepted a relative rootfs")
	}
}

func TestRestrict(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root (mknod of device nodes must work without Landlock for the test to mean anything); CI runs as root")
	}
	if abi := ABI(); abi < MinABI {
		t.Skipf("SKIP: kernel Landlock ABI %d is below %d (0 = absent); Restrict refuses to run", abi, MinABI)
	}
	// An abstract socket owned by this (unrestricted) process.
	abstract := fmt.Sprintf("warden-ll-outside-%d", os.Getpid())
	ln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	base := runHelper(t, "baseline", abstract)
	for _, mode := range []string{"restricted", "exec"} {
		t.Run(mode, func(t *testing.T) {
			rep := runHelper(t, mode, abstract)
			// Restrict scopes only with TSYNC (one domain for all threads);
			// ExecRestricted always has one domain.
			scoped := rep.ABI >= TSyncABI
			if mode == "exec" {
				if rep.Mode != "post-exec" {
					t.Fatalf("helper did not re-exec: mode %q", rep.Mode)
				}
				scoped = rep.ABI >= 6
			}
			singleDomain := mode == "exec" || rep.ABI >= TSyncABI
			checkReport(t, base, rep, scoped, singleDomain)
		})
	}
}

func checkReport(t *testing.T, base, rest report, scoped, singleDomain bool) {
	t.Helper()
	want := map[string]string{ // errno under Landlock; "" = must succeed
		"mknod_char":                   "EACCES",
		"mknod_block":                  "EACCES",
		"ioctl_dev_outside_dev":        "EACCES",
		"child_inherits_mknod_denial":  "EACCES",
		"abstract_unix_outside_domain": "",
		"signal_outside_domain":        "",
	}
	if scoped {
		want["abstract_unix_outside_domain"] = "EPERM"
		want["signal_outside_domain"] = "EPERM"
	}
	for _, p := range probes {
		got, b := rest.Probes[p.name], base.Probes[p.name]
		w, denied := want[p.name]
		switch {
		case denied && w != "":
			if got.OK || got.Errno != w {
				t.Errorf("%s under Landlock: %v, want %s", p.name, got, w)
			}
			if p.name == "ioctl_dev_outside_dev" {
				if b.Errno != "ENOTTY" {
					t.Errorf("%s without Landlock: %v, want ENOTTY from the driver", p.name, b)
				}
			} else if !b.OK {
				t.Errorf("%s without Landlock: %v, want success (otherwise the probe proves nothing)", p.name, b)
			}
		case p.name == "proc_exe_of_children_across_threads" && !singleDomain:
			// Known limitation of per-thread enforcement (sibling domains):
			// logged, not required. ExecRestricted has no such gap.
			if !got.OK {
				t.Logf("NOTE: per-thread Landlock domains: %s: %v", p.name, got)
			}
		case p.name == "ioctl_dev_null":
			if got.Errno != "ENOTTY" || b.Errno != "ENOTTY" {
				t.Errorf("%s: restricted %v, baseline %v; want ENOTTY (the ioctl reaches the driver)", p.name, got, b)
			}
		default:
			if !got.OK {
				t.Errorf("%s under Landlock: %v, want success", p.name, got)
			}
			if !b.OK {
				t.Errorf("%s without Landlock: %v, want success", p.name, b)
			}
		}
		t.Logf("%-30s restricted: %-8v baseline: %v", p.name, short(got), short(b))
	}
	for i, r := range rest.PerThread {
		if r.Errno != "EACCES" {
			t.Errorf("thread %d: mknod under Landlock: %v, want EACCES", i, r)
		}
	}
	for i, r := range base.PerThread {
		if !r.OK {
			t.Errorf("thread %d: mknod without Landlock: %v, want success", i, r)
		}
	}
	t.Logf("ABI %d, scopes enforced: %v; %d threads all denied mknod", rest.ABI, scoped, len(rest.PerThread))
}

func short(r result) string {
	if r.OK {
		return "ok"
	}
	if r.Errno != "" {
		return r.Errno
	}
	return r.Detail
}
