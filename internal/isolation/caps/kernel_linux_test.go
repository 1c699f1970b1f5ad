//go:build linux

package caps

// Kernel tests: the test binary re-executes itself as a helper (selected by
// helperEnv) that changes its own capability sets and execs children, and
// reports JSON on stdout. The test process itself is never changed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/warden-sandbox/warden/internal/isolation/landlock"
	"github.com/warden-sandbox/warden/internal/isolation/seccomp"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

const (
	helperEnv         = "WARDEN_CAPS_TEST_HELPER" // baseline | locked
	suidEnv           = "WARDEN_CAPS_TEST_SUID"   // path of a setuid-root copy of id(1)
	capNetBindService = 10
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

type report struct {
	Err        string   `json:"error,omitempty"`
	Before     []Status `json:"before"`
	After      []Status `json:"after"`
	RootChild  Status   `json:"root_child"`
	UserChild  Status   `json:"user_child"`
	SuidEUID   string   `json:"suid_euid"`
	ExecErrors []string `json:"exec_errors,omitempty"`
}

// raiseAmbient puts CAP_NET_BIND_SERVICE into the inheritable and ambient
// sets of every thread, so there is something for ClearInheritableAmbient to
// clear.
func raiseAmbient() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable |= 1 << capNetBindService
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, capNetBindService, 0, 0, 0); e != 0 {
		return fmt.Errorf("raise ambient: %w", e)
	}
	return nil
}

func childStatus(cred *syscall.Credential) (Status, error) {
	cmd := exec.Command("/bin/cat", "/proc/self/status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	if err != nil {
		return Status{}, fmt.Errorf("cat /proc/self/status as %+v: %w", cred, err)
	}
	return Parse(bytes.NewReader(out))
}

func helperMain(mode string) int {
	var rep report
	emit := func() int {
		json.NewEncoder(os.Stdout).Encode(rep)
		return 0
	}
	fail := func(err error) int {
		rep.Err = err.Error()
		return emit()
	}
	// Threads that exist before the change; they must be changed too.
	release := make(chan struct{})
	defer close(release)
	for range 8 {
		go func() {
			runtime.LockOSThread()
			<-release
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := raiseAmbient(); err != nil {
		return fail(err)
	}
	var err error
	if rep.Before, err = Threads(); err != nil {
		return fail(err)
	}
	if mode == "locked" {
		// The agent's order: Landlock, capabilities, seccomp last.
		if err := landlock.Restrict("/"); err != nil {
			return fail(err)
		}
		if err := DropBounding(); err != nil {
			return fail(err)
		}
		if err := ClearInheritableAmbient(); err != nil {
			return fail(err)
		}
		if err := seccomp.Apply(); err != nil {
			return fail(err)
		}
	}
	if rep.After, err = Threads(); err != nil {
		return fail(err)
	}
	if rep.RootChild, err = childStatus(nil); err != nil {
		rep.ExecErrors = append(rep.ExecErrors, err.Error())
	}
	if rep.UserChild, err = childStatus(&syscall.Credential{Uid: 1000, Gid: 1000}); err != nil {
		rep.ExecErrors = append(rep.ExecErrors, err.Error())
	}
	cmd := exec.Command(os.Getenv(suidEnv), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		rep.ExecErrors = append(rep.ExecErrors, fmt.Sprintf("setuid id: %v: %s", err, stderr.String()))
	}
	rep.SuidEUID = strings.TrimSpace(string(out))
	return emit()
}

func runHelper(t *testing.T, mode, suid string) report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, suidEnv+"="+suid)
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
	if len(rep.ExecErrors) > 0 {
		t.Fatalf("%s helper: %s", mode, strings.Join(rep.ExecErrors, "; "))
	}
	return rep
}

// setuidID makes a setuid-root copy of id(1) in a directory uid 1000 can reach.
func setuidID(t *testing.T) string {
	t.Helper()
	src, err := exec.LookPath("id")
	if err != nil {
		t.Fatalf("id(1) not found: %v", err)
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	dst := filepath.Join(dir, "id-suid")
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if err := os.Chmod(dst, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestLastCap(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Skipf("SKIP: /proc/sys/kernel/cap_last_cap unreadable: %v", err)
	}
	n, err := LastCap()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(n) != strings.TrimSpace(string(b)) {
		t.Fatalf("LastCap = %d, cap_last_cap = %s", n, b)
	}
	if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(n+1), 0, 0, 0); err != unix.EINVAL {
		t.Fatalf("capability %d should be unknown to the kernel, PR_CAPBSET_READ says %v", n+1, err)
	}
}

func TestCurrent(t *testing.T) {
	s, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	if s.Pid != os.Getpid() {
		t.Fatalf("Pid %d, want %d", s.Pid, os.Getpid())
	}
	ths, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	if len(ths) < 2 {
		t.Fatalf("saw %d threads of a Go test binary", len(ths))
	}
}

func TestDropAndClearAllThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root (CAP_SETPCAP to shrink the bounding set, setuid to 1000); CI runs as root")
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("SKIP: the seccomp policy applied by the helper is x86_64-only (running on %s)", runtime.GOARCH)
	}
	suid := setuidID(t)
	base := runHelper(t, "baseline", suid)
	locked := runHelper(t, "locked", suid)

	// The raise reached every thread, so the clear below had work to do on
	// every thread.
	for _, s := range locked.Before {
		if s.CapAmb&(1<<capNetBindService) == 0 || s.CapInh&(1<<capNetBindService) == 0 {
			t.Fatalf("thread %d before: CapInh %#x CapAmb %#x, the test setup did not reach it", s.Pid, s.CapInh, s.CapAmb)
		}
	}
	if len(locked.After) < 9 {
		t.Errorf("expected at least 9 threads, saw %d", len(locked.After))
	}
	for _, s := range locked.After {
		if s.CapBnd != 0 || s.CapInh != 0 || s.CapAmb != 0 || !s.NoNewPrivs || s.Seccomp != 2 {
			t.Errorf("thread %d after: CapBnd %#x CapInh %#x CapAmb %#x NoNewPrivs %v Seccomp %d",
				s.Pid, s.CapBnd, s.CapInh, s.CapAmb, s.NoNewPrivs, s.Seccomp)
		}
		if s.CapEff == 0 {
			t.Errorf("thread %d after: the agent lost its effective set (it needs it to switch users)", s.Pid)
		}
	}
	t.Logf("%d threads after: CapBnd/CapInh/CapAmb 0, NoNewPrivs 1, Seccomp 2; CapEff kept (%#x)", len(locked.After), locked.After[0].CapEff)

	for name, s := range map[string]Status{"uid 0 child": locked.RootChild, "uid 1000 child": locked.UserChild} {
		if !s.Locked() {
			t.Errorf("%s: %+v, want CapInh/Prm/Eff/Bnd/Amb 0, NoNewPrivs 1, Seccomp 2", name, s)
		}
		t.Logf("%s: uid %d CapInh %#x CapPrm %#x CapEff %#x CapBnd %#x CapAmb %#x NoNewPrivs %v Seccomp %d",
			name, s.Uid[1], s.CapInh, s.CapPrm, s.CapEff, s.CapBnd, s.CapAmb, s.NoNewPrivs, s.Seccomp)
	}
	if locked.UserChild.Uid != [4]uint32{1000, 1000, 1000, 1000} {
		t.Errorf("uid 1000 child has uids %v", locked.UserChild.Uid)
	}

	// Without the lock-down the same children keep capabilities: the
	// checks above are not vacuous.
	if base.RootChild.CapEff == 0 || base.RootChild.CapBnd == 0 {
		t.Errorf("baseline uid 0 child: CapEff %#x CapBnd %#x, expected non-zero", base.RootChild.CapEff, base.RootChild.CapBnd)
	}
	for _, s := range base.After {
		if s.CapAmb == 0 || s.CapBnd == 0 {
			t.Errorf("baseline thread %d: CapAmb %#x CapBnd %#x, expected non-zero", s.Pid, s.CapAmb, s.CapBnd)
		}
	}

	// Probe 8: a setuid-root binary does not raise the effective uid.
	if locked.SuidEUID != "1000" {
		t.Errorf("setuid-root id(1) run by uid 1000 under no_new_privs reports euid %q, want 1000", locked.SuidEUID)
	}
	if base.SuidEUID != "0" {
		t.Logf("NOTE: without no_new_privs the setuid-root copy reports euid %q (nosuid filesystem?); the probe proves less", base.SuidEUID)
	} else {
		t.Logf("setuid-root id(1) as uid 1000: euid %s without no_new_privs, %s with", base.SuidEUID, locked.SuidEUID)
	}
}
