package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// ucountsTool exhausts, or tries once, the two per-user kernel counts a
// sandbox can fill from inside: inotify instances (fs.inotify.max_user_instances)
// and queued signals (RLIMIT_SIGPENDING). Signals are queued, with
// rt_tgsigqueueinfo, to a thread of its own that blocks them, so they stay
// pending; "exhaust" then holds everything until stdin closes.
const ucountsTool = `package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

const sig = 40 // a real-time signal: each one queued is charged

type report struct {
	Inotify    int    ` + "`json:\"inotify\"`" + `
	InotifyErr string ` + "`json:\"inotify_err\"`" + `
	Signals    int    ` + "`json:\"signals\"`" + `
	SignalsErr string ` + "`json:\"signals_err\"`" + `
}

func name(e syscall.Errno) string {
	switch e {
	case syscall.EMFILE:
		return "EMFILE"
	case syscall.EAGAIN:
		return "EAGAIN"
	}
	return e.Error()
}

func main() {
	limit := 1
	if len(os.Args) > 1 && os.Args[1] == "exhaust" {
		limit = 1 << 24
	}
	done := make(chan report)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread holds the pending signals
		var r report
		mask := uint64(1) << (sig - 1)
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0); e != 0 {
			r.SignalsErr = "sigprocmask: " + e.Error()
		}
		var info [128]byte
		binary.LittleEndian.PutUint32(info[0:], sig)
		binary.LittleEndian.PutUint32(info[8:], 0xffffffff) // si_code SI_QUEUE (-1)
		binary.LittleEndian.PutUint32(info[16:], uint32(os.Getpid()))
		binary.LittleEndian.PutUint32(info[20:], uint32(os.Getuid()))
		pid, tid := os.Getpid(), syscall.Gettid()
		for r.SignalsErr == "" && r.Signals < limit {
			_, _, e := syscall.RawSyscall6(syscall.SYS_RT_TGSIGQUEUEINFO, uintptr(pid), uintptr(tid), sig, uintptr(unsafe.Pointer(&info)), 0, 0)
			if e != 0 {
				r.SignalsErr = name(e)
				break
			}
			r.Signals++
		}
		for r.Inotify < limit {
			_, _, e := syscall.RawSyscall(syscall.SYS_INOTIFY_INIT1, syscall.IN_CLOEXEC, 0, 0)
			if e != 0 {
				r.InotifyErr = name(e)
				break
			}
			r.Inotify++
		}
		done <- r
		select {}
	}()
	r := <-done
	json.NewEncoder(os.Stdout).Encode(r)
	if limit > 1 {
		io.Copy(io.Discard, os.Stdin)
	}
}
`

type ucountsReport struct {
	Inotify    int    `json:"inotify"`
	InotifyErr string `json:"inotify_err"`
	Signals    int    `json:"signals"`
	SignalsErr string `json:"signals_err"`
}

// ok reports whether a "try" run got its inotify instance and its signal.
func (r ucountsReport) ok() bool {
	return r.Inotify == 1 && r.InotifyErr == "" && r.Signals == 1 && r.SignalsErr == ""
}

// exhausted reports whether an "exhaust" run stopped at the kernel's limits.
func (r ucountsReport) exhausted() bool { return r.InotifyErr == "EMFILE" && r.SignalsErr == "EAGAIN" }

func buildUcountsTool(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(ucountsTool), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module ucounts\n\ngo 1.22\n"), 0o644)
	cmd := exec.Command("go", "build", "-o", "ucounts", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build ucounts tool: %v\n%s", err, out)
	}
	return filepath.Join(dir, "ucounts")
}

// hostTry runs the tool once on the host as root (the test's own uid 0), so
// its inotify instance and its queued signal are charged to host uid 0.
func hostTry(t *testing.T, tool string) ucountsReport {
	t.Helper()
	out, err := exec.Command(tool, "try").Output()
	if err != nil {
		t.Fatalf("ucounts tool on the host: %v", err)
	}
	var r ucountsReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ucounts tool on the host: %q: %v", out, err)
	}
	return r
}

// TestSandboxKernelAccountingIsolated (issue 15, item 5): a sandbox that
// exhausts the kernel's per-user counts (inotify instances, queued signals)
// as its user and as its root leaves them available to another sandbox and to
// root on the host. Each native sandbox's user namespace is owned by a host
// uid of its own, and the kernel charges those counts to the owner of every
// namespace up the chain; were the namespaces owned by wardend's uid 0,
// sandbox A would spend host root's whole fs.inotify.max_user_instances and
// RLIMIT_SIGPENDING, and B and host root would get EMFILE and EAGAIN.
func TestSandboxKernelAccountingIsolated(t *testing.T) {
	tool := buildUcountsTool(t)
	if r := hostTry(t, tool); !r.ok() {
		t.Fatalf("before any sandbox, root on the host cannot get an inotify instance and queue a signal (%+v): this host is already at its limits", r)
	}
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body, err := os.ReadFile(tool)
	if err != nil {
		t.Fatal(err)
	}
	const inside = "/tmp/ucounts"
	var ids []string
	for range 2 {
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFile(ctx, sb.ID, inside, bytes.NewReader(body), warden.WriteOptions{Mode: 0o755}); err != nil {
			t.Fatalf("upload tool: %v", err)
		}
		ids = append(ids, sb.ID)
	}
	a, b := ids[0], ids[1]

	// A exhausts both counts, first as its user, then as its root, and
	// holds them.
	for _, user := range []string{"", "root"} {
		p, err := c.StartProcess(ctx, a, warden.ExecRequest{Cmd: []string{inside, "exhaust"}, User: user, Stdin: true})
		if err != nil {
			t.Fatalf("exhaust as %q: %v", user, err)
		}
		r, err := readReport(p)
		if err != nil {
			p.Close()
			t.Fatalf("exhaust as %q: %v", user, err)
		}
		t.Logf("sandbox A as %q: %+v", user, r)
		if !r.exhausted() {
			p.Close()
			t.Fatalf("sandbox A as %q did not stop at the kernel's limits: %+v", user, r)
		}
		if user == "" && (r.Inotify == 0 || r.Signals == 0) {
			p.Close()
			t.Fatalf("sandbox A's user could not get a single inotify instance or queued signal: %+v", r)
		}
		pid := p.PID()
		t.Cleanup(func() {
			c.CloseStdin(context.Background(), a, pid)
			p.Close()
		})
	}

	// B still gets its own, as its user and as its root.
	for _, user := range []string{"", "root"} {
		var out, errb bytes.Buffer
		res, err := c.Exec(ctx, b, warden.ExecRequest{Cmd: []string{inside, "try"}, User: user}, warden.ExecIO{Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("try in sandbox B as %q: %v %+v: %s", user, err, res, errb.String())
		}
		var r ucountsReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("try in sandbox B as %q: %q: %v", user, out.String(), err)
		}
		if !r.ok() {
			t.Errorf("sandbox B as %q cannot get an inotify instance or queue a signal while sandbox A holds its own (%+v): the sandboxes share one kernel account", user, r)
		}
	}
	// And so does root on the host.
	if r := hostTry(t, tool); !r.ok() {
		t.Errorf("root on the host cannot get an inotify instance or queue a signal while sandbox A holds its own (%+v): sandboxes are charged to host uid 0", r)
	}
}

// readReport reads the tool's JSON line from a process stream.
func readReport(p *warden.ProcessStream) (ucountsReport, error) {
	var out, errb strings.Builder
	for {
		ev, err := p.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ucountsReport{}, errors.New("ended before reporting: " + errb.String())
			}
			return ucountsReport{}, err
		}
		switch ev.Type {
		case warden.EventStdout:
			out.Write(ev.Data)
		case warden.EventStderr:
			errb.Write(ev.Data)
		}
		if s := out.String(); strings.Contains(s, "\n") {
			var r ucountsReport
			if err := json.Unmarshal([]byte(s), &r); err != nil {
				return r, errors.New("bad report " + s)
			}
			return r, nil
		}
	}
}
