//go:build linux

package main

// Probes 22–27: fork bomb, memory bomb, disk fill, fd exhaustion, CPU hog,
// kill(-1). Each bomb runs in a child process of its own, so when it is
// killed (as it should be) the probe runner survives, and is bounded in size
// and time whatever the limits are.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childResult is what a bomb child reported and how it ended.
type childResult struct {
	last     []string // fields of the last line: "P n", "E errno n ...", "DONE n"
	progress int64    // the largest "P n" or the final count
	signal   syscall.Signal
	exitCode int
	stderr   string
	err      error
}

func (c childResult) String() string {
	end := fmt.Sprintf("exit %d", c.exitCode)
	if c.signal != 0 {
		end = "killed by " + unix.SignalName(c.signal)
	}
	if c.err != nil {
		end += " (" + c.err.Error() + ")"
	}
	s := fmt.Sprintf("%s, last report %q", end, strings.Join(c.last, " "))
	if e := strings.TrimSpace(c.stderr); e != "" {
		if len(e) > 200 {
			e = e[:200] + "..."
		}
		s += ", stderr " + strconv.Quote(e)
	}
	return s
}

// runBomb runs "warden-probe -child kind args..." with a deadline.
func runBomb(timeout time.Duration, env []string, kind string, args ...string) childResult {
	timeout = budget(timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe", append([]string{"-child", kind}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	var res childResult
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.signal = ws.Signal()
		}
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		res.err = err
	}
	if ctx.Err() != nil {
		res.err = fmt.Errorf("timed out after %s", timeout)
	}
	res.stderr = errb.String()
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		res.last = f
		if n, err := strconv.ParseInt(f[len(f)-1], 10, 64); err == nil && (f[0] == "P" || f[0] == "DONE") && n > res.progress {
			res.progress = n
		}
	}
	return res
}

// errField returns the errno name of an "E errno ..." report.
func (c childResult) errField() string {
	if len(c.last) >= 2 && c.last[0] == "E" {
		return c.last[1]
	}
	return ""
}

func (c childResult) count() int64 {
	if len(c.last) >= 3 {
		n, _ := strconv.ParseInt(c.last[2], 10, 64)
		return n
	}
	return 0
}

func (c childResult) done() bool { return len(c.last) > 0 && c.last[0] == "DONE" }

func probeForkBomb(r *reporter) {
	const id = 22
	limit := opts.PidsLimit
	if limit <= 0 {
		r.skip(id, "fork-bomb", "no -pids-limit given")
		return
	}
	max := limit * 4
	res := runBomb(20*time.Second, []string{"GOMAXPROCS=1"}, "forkbomb", strconv.FormatInt(max, 10))
	switch {
	case res.done():
		r.fail(id, "fork-bomb", fmt.Sprintf("%d processes started under a pids limit of %d: %s", res.progress, limit, res))
	case res.errField() == "EAGAIN" && res.count() < limit:
		r.pass(id, "fork-bomb", fmt.Sprintf("stopped at %d processes with EAGAIN (pids limit %d)", res.count(), limit))
	case strings.Contains(res.stderr, "failed to create new OS thread") || strings.Contains(res.stderr, "resource temporarily unavailable"):
		r.pass(id, "fork-bomb", fmt.Sprintf("the bomb itself could not create a thread (pids limit %d): %s", limit, res))
	default:
		r.fail(id, "fork-bomb", fmt.Sprintf("unexpected end (pids limit %d): %s", limit, res))
	}
	// The sandbox recovers once the bomb is gone.
	var err error
	deadline := time.Now().Add(budget(5 * time.Second))
	for time.Now().Before(deadline) {
		if err = exec.Command("/bin/true").Run(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.check(id, "fork-recovers", err == nil, "fork+exec after the bomb: "+describe(err))
}

func probeMemoryBomb(r *reporter) {
	const id = 23
	// Lowering one's OOM score (to make someone else the victim) needs
	// CAP_SYS_RESOURCE.
	r.expect(id, "oom-score-adj-lower", writeProc("/proc/self/oom_score_adj", "-1000"), unix.EACCES, unix.EPERM)
	limit := opts.MemLimit
	if limit <= 0 {
		r.skip(id, "memory-bomb", "no -mem-limit given")
		return
	}
	target := strconv.FormatInt(2*limit, 10)
	judge := func(name string, res childResult, what string) {
		switch {
		case res.done():
			r.fail(id, name, fmt.Sprintf("%s %s under a %s memory limit: %s", what, mib(res.progress), mib(limit), res))
		case res.signal == syscall.SIGKILL:
			r.pass(id, name, fmt.Sprintf("OOM-killed after %s: %s", mib(res.progress), res))
		case res.errField() == "ENOMEM" || res.errField() == "ENOSPC":
			r.pass(id, name, fmt.Sprintf("%s after %s", res.errField(), mib(res.count())))
		case strings.Contains(res.stderr, "out of memory") || strings.Contains(res.stderr, "cannot allocate memory"):
			r.pass(id, name, "allocation refused: "+res.String())
		default:
			r.fail(id, name, "unexpected end: "+res.String())
		}
	}
	judge("anonymous", runBomb(30*time.Second, nil, "mem-anon", target), "allocated")
	for _, p := range []string{"/tmp/.warden-probe-membomb", "/dev/shm/.warden-probe-membomb"} {
		res := runBomb(30*time.Second, nil, "fill", p, target)
		os.Remove(p)
		judge("tmpfs:"+p, res, "wrote")
	}
	judge("sysv-shm", runBomb(30*time.Second, nil, "sysv-shm", target), "touched")
}

// probeMemfdBomb is the -memfd-bomb mode (probe 23, run in a sandbox of its
// own): memory written into a memfd belongs to no process's RSS, so when it
// fills the cgroup the OOM killer may pick any process of the sandbox, the
// agent included. The host judges whether the agent survived.
func probeMemfdBomb(r *reporter) {
	const id = 23
	if opts.MemLimit <= 0 {
		r.skip(id, "memfd", "no -mem-limit given")
		return
	}
	res := runBomb(30*time.Second, nil, "memfd", strconv.FormatInt(2*opts.MemLimit, 10))
	switch {
	case res.done():
		r.fail(id, "memfd", fmt.Sprintf("wrote %s into a memfd under a %s memory limit: %s", mib(res.progress), mib(opts.MemLimit), res))
	case res.signal == syscall.SIGKILL || res.errField() == "ENOMEM" || res.errField() == "ENOSPC":
		r.pass(id, "memfd", fmt.Sprintf("stopped after %s: %s", mib(res.progress), res))
	default:
		r.fail(id, "memfd", "unexpected end: "+res.String())
	}
	r.emit(Result{ID: 0, Name: "complete", Pass: true, Detail: "memfd bomb done"})
}

func probeDiskFill(r *reporter) {
	const id = 24
	limit := opts.DiskLimit
	if limit <= 0 {
		r.skip(id, "disk-fill", "no -disk-limit given")
		return
	}
	p := "/home/user/.warden-probe-fill"
	if isRoot() {
		p = "/root/.warden-probe-fill"
	}
	// Four times the limit: if it does not hold, the host sees the difference.
	res := runBomb(25*time.Second, nil, "fill", p, strconv.FormatInt(4*limit, 10))
	os.Remove(p)
	switch {
	case res.done():
		r.fail(id, "write", fmt.Sprintf("wrote %s under a %s disk limit", mib(res.progress), mib(limit)))
	case (res.errField() == "ENOSPC" || res.errField() == "EDQUOT") && res.count() <= limit:
		r.pass(id, "write", fmt.Sprintf("%s after %s (disk limit %s)", res.errField(), mib(res.count()), mib(limit)))
	default:
		r.fail(id, "write", fmt.Sprintf("expected ENOSPC within %s: %s", mib(limit), res))
	}
	// fallocate asks for all of it at once.
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		r.fail(id, "fallocate", "create: "+describe(err))
		return
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, 2*limit)
	f.Close()
	os.Remove(p)
	r.expect(id, "fallocate", err, unix.ENOSPC, unix.EDQUOT)
}

func probeFDs(r *reporter) {
	const id = 25
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	raise := unix.Rlimit{Cur: lim.Max + 1, Max: lim.Max + 1}
	r.expect(id, "raise-nofile", unix.Setrlimit(unix.RLIMIT_NOFILE, &raise), unix.EPERM)
	res := runBomb(15*time.Second, nil, "fds")
	n := res.count()
	switch {
	case res.errField() == "EMFILE" && uint64(n) <= lim.Max:
		r.pass(id, "exhaust", fmt.Sprintf("EMFILE after %d descriptors (RLIMIT_NOFILE %d)", n, lim.Max))
	default:
		r.fail(id, "exhaust", fmt.Sprintf("expected EMFILE within %d descriptors: %s", lim.Max, res))
	}
	if opts.NofileLimit > 0 {
		r.check(id, "nofile-limit", lim.Max <= uint64(opts.NofileLimit), fmt.Sprintf("RLIMIT_NOFILE hard limit %d, the sandbox's limit %d", lim.Max, opts.NofileLimit))
	}
}

func probeCPU(r *reporter) {
	const id = 26
	if opts.CPUMillis <= 0 {
		r.skip(id, "cpu-hog", "no -cpu-millis given")
		return
	}
	n := runtime.NumCPU()
	if n < 2 {
		n = 2
	}
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	const dur = 2 * time.Second
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	start := time.Now()
	done := make(chan struct{})
	for i := 0; i < n; i++ {
		go func() {
			x := 0
			for time.Since(start) < dur {
				for j := 0; j < 100000; j++ {
					x += j
				}
			}
			_ = x
			done <- struct{}{}
		}()
	}
	for i := 0; i < n; i++ {
		<-done
	}
	wall := time.Since(start)
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()+ru1.Stime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	used := cpu.Seconds() / wall.Seconds()
	allowed := float64(opts.CPUMillis) / 1000
	// Only a note: what a process sees of its own CPU time is the kernel's
	// account under the native backend but gVisor's sampled clock under
	// gvisor, which overcounts when the host is loaded. The host judges the
	// limit by the sandbox's cgroup over the same run.
	r.note(id, "cpu-hog", fmt.Sprintf("%d busy threads saw %.2f CPUs over %s (inside view); limit %.2f", n, used, wall.Round(time.Millisecond), allowed))
}

// probeKillAll is the -kill-all mode (probe 27): kill(-1, SIGKILL) kills
// every process this one may signal except itself. A child of our own shows
// the call did something; the host then checks that the agent still
// answers, that the sandbox is still running and that its canaries live.
func probeKillAll(r *reporter) {
	const id = 27
	child := exec.Command("/bin/sleep", "30")
	if err := child.Start(); err != nil {
		r.fail(id, "kill-all", "start a victim: "+describe(err))
		return
	}
	err := unix.Kill(-1, unix.SIGKILL)
	waited := make(chan error, 1)
	go func() { waited <- child.Wait() }()
	var victim string
	select {
	case <-waited:
		if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			victim = "killed"
		} else {
			victim = "ended: " + child.ProcessState.String()
		}
	case <-time.After(budget(5 * time.Second)):
		child.Process.Kill()
		victim = "still alive after 5s"
	}
	r.check(id, "kill-all", err == nil && victim == "killed",
		fmt.Sprintf("kill(-1, SIGKILL): %s; own child %s; the host checks the agent and its canaries", describe(err), victim))
	r.emit(Result{ID: 0, Name: "complete", Pass: true, Detail: "kill-all done"})
}

// runChild implements the -child modes. Each prints progress lines and one
// final line: "DONE n" when it reached its target (the limit did not hold),
// or "E <errno> <n> ..." when the kernel refused.
func runChild(kind string, args []string) int {
	arg := func(i int) int64 {
		if i >= len(args) {
			fmt.Fprintln(os.Stderr, "missing argument")
			os.Exit(2)
		}
		n, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return n
	}
	// The bomb is the victim the OOM killer must take, not the probe that
	// reports on it: memory in a memfd or on a tmpfs is in no process's
	// RSS, so with equal oom_score_adj (the agent's 500 for every user
	// process) the killer could pick the reporting parent and the probe
	// would end without a report. Raising the value needs no privilege.
	os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	switch kind {
	case "mem-anon":
		return childMemAnon(arg(0))
	case "fill":
		if len(args) < 2 {
			return 2
		}
		return childFill(args[0], arg(1))
	case "memfd":
		fd, err := unix.MemfdCreate("warden-probe", unix.MFD_CLOEXEC)
		if err != nil {
			fmt.Printf("E %s 0\n", describe(err))
			return 3
		}
		return childWrite(fd, arg(0))
	case "sysv-shm":
		return childSysvShm(arg(0))
	case "forkbomb":
		return childForkBomb(arg(0))
	case "fds":
		return childFDs()
	}
	fmt.Fprintln(os.Stderr, "unknown child kind", kind)
	return 2
}

func childMemAnon(n int64) int {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		fmt.Printf("E %s 0\n", describe(err))
		return 3
	}
	page := os.Getpagesize()
	for i := 0; i < len(b); i += page {
		b[i] = 1
		if i%(4<<20) == 0 {
			fmt.Printf("P %d\n", i)
		}
	}
	fmt.Printf("DONE %d\n", len(b))
	return 0
}

// childSysvShm maps a SysV shared memory segment (removed at once, so it
// dies with its last user) and touches it: the pages count as this
// process's RSS, so the OOM killer picks it.
func childSysvShm(n int64) int {
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, int(n), unix.IPC_CREAT|0o600)
	if err != nil {
		fmt.Printf("E %s 0\n", describe(err))
		return 3
	}
	b, err := unix.SysvShmAttach(id, 0, 0)
	unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	if err != nil {
		fmt.Printf("E %s 0\n", describe(err))
		return 3
	}
	page := os.Getpagesize()
	for i := 0; i < len(b); i += page {
		b[i] = 1
		if i%(4<<20) == 0 {
			fmt.Printf("P %d\n", i)
		}
	}
	fmt.Printf("DONE %d\n", len(b))
	return 0
}

func childFill(p string, n int64) int {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		fmt.Printf("E %s 0\n", describe(err))
		return 3
	}
	return childWrite(fd, n)
}

func childWrite(fd int, n int64) int {
	chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
	var written int64
	for written < n {
		k, err := unix.Write(fd, chunk)
		if k > 0 {
			written += int64(k)
		}
		if err != nil {
			fmt.Printf("E %s %d\n", describe(err), written)
			return 3
		}
		if k == 0 {
			fmt.Printf("E short-write %d\n", written)
			return 3
		}
		if written%(4<<20) == 0 {
			fmt.Printf("P %d\n", written)
		}
	}
	fmt.Printf("DONE %d\n", written)
	return 0
}

func childForkBomb(max int64) int {
	runtime.LockOSThread() // Pdeathsig follows the forking thread
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	var pids []int
	defer func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		for _, p := range pids {
			var ws syscall.WaitStatus
			syscall.Wait4(p, &ws, 0, nil)
		}
	}()
	for int64(len(pids)) < max {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "20"}, attr)
		if err != nil {
			fmt.Printf("E %s %d\n", describe(err), len(pids))
			return 3
		}
		pids = append(pids, pid)
	}
	fmt.Printf("DONE %d\n", len(pids))
	return 0
}

func childFDs() int {
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	n := 0
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Printf("E %s %d %d %d\n", describe(err), n, lim.Cur, lim.Max)
			return 3
		}
		_ = fd
		n++
		if uint64(n) > lim.Max+16 || n > 1<<21 {
			fmt.Printf("DONE %d\n", n)
			return 0
		}
	}
}
