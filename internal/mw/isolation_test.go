package mw

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/isolation/cgroup"
)

// workerSet is a Set whose scripts run in a worker process (this test
// binary, see TestMain).
func workerSet(t *testing.T, wo WorkerOptions, opts Options, mws ...Middleware) *Set {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wo.Command = []string{exe, "-test.run=^$"}
	wo.Env = append(wo.Env, testWorkerEnv+"=1")
	opts.Worker = &wo
	s, err := New(opts, mws...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func codeMW(name string, timeoutMS int64, script string) Middleware {
	return Middleware{Name: name, Kinds: []govern.Kind{govern.KindCodeRun}, TimeoutMS: timeoutMS, MaxMemoryMB: 1024, Script: script}
}

// inFlight waits until the shared worker has n calls in flight.
func inFlight(t *testing.T, s *Set, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.worker.mu.Lock()
		p := s.worker.proc
		s.worker.mu.Unlock()
		if p != nil {
			p.mu.Lock()
			k := len(p.pending)
			p.mu.Unlock()
			if k >= n {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the worker never had %d calls in flight", n)
}

// TestWorkerRunawayIsolation: a runaway call does not take down an innocent
// call in flight on the same worker. For each kind of runaway (a loop the
// interrupt ends, an allocation that kills the worker, a regular
// expression that backtracks past the interrupt so that the worker is
// killed), a slow, well-behaved call is started first and the runaway while
// it runs: the slow call gets its verdict, and the runaway gets the failure
// (on_error closed) within its limit.
func TestWorkerRunawayIsolation(t *testing.T) {
	s := workerSet(t, WorkerOptions{MemoryBytes: 512 << 20}, Options{})
	slow := func(ms int) Middleware {
		return codeMW("slow", 5000, fmt.Sprintf(`function pre(a) { var t = Date.now(); while (Date.now() - t < %d) {} return {modify: "slow done"}; }`, ms))
	}
	cases := []struct {
		name     string
		slowMS   int
		runaway  Middleware
		wantErr  string
		maxTaken time.Duration // the runaway's outcome arrives within this
	}{
		{"while(true)", 600, codeMW("spin", 100, `function pre(a) { while (true) {} }`), "time limit exceeded", 100*time.Millisecond + time.Second},
		{"allocation", 600, codeMW("hog", 5000, `function pre(a) { var b = []; for (;;) b.push(new ArrayBuffer(64 * 1024 * 1024)); }`), ErrWorkerDied.Error(), 5 * time.Second},
		// The worker is killed workerGrace after the limit: the slow call
		// must still be running then.
		{"backtracking regexp", 2600, codeMW("regexp", 100, `function pre(a) { /^(a+)+\1$/.test("a".repeat(40) + "!"); return {allow: true}; }`), "time limit exceeded", 100*time.Millisecond + time.Second},
	}
	action := func() *govern.Action {
		return &govern.Action{Kind: govern.KindCodeRun, Code: govern.NewCode("python", "x")}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			var slowV Verdict
			var slowErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				slowV, slowErr = s.Test(context.Background(), slow(tc.slowMS), "pre", action(), nil)
			}()
			inFlight(t, s, 1)
			start := time.Now()
			v, err := s.Test(context.Background(), tc.runaway, "pre", action(), nil)
			took := time.Since(start)
			wg.Wait()
			if err != nil || slowErr != nil {
				t.Fatal(err, slowErr)
			}
			if slowV.Action != "modify" || string(slowV.Modified) != `"slow done"` {
				t.Fatalf("the innocent call in flight: %+v", slowV)
			}
			if v.Action != "error" || v.OnError != FailClosed || !strings.Contains(v.Error, tc.wantErr) {
				t.Fatalf("the runaway: %+v, want an error with %q", v, tc.wantErr)
			}
			if took > tc.maxTaken {
				t.Fatalf("the runaway's outcome took %v, more than %v", took, tc.maxTaken)
			}
		})
	}
	// A call after all this works.
	v, err := s.Test(context.Background(), slow(1), "pre", action(), nil)
	if err != nil || v.Action != "modify" {
		t.Fatalf("after the runaways: %+v %v", v, err)
	}
}

// TestWorkerCPULimit: the worker runs in a cgroup of its own with a CPU
// quota of CPUMillis, which throttles a spinning script; Close removes the
// cgroup. (The quota is tiny, 5 ms of CPU per 100 ms, so that the spin is
// throttled even on a loaded host.)
func TestWorkerCPULimit(t *testing.T) {
	if _, err := cgroup.Available(); err != nil {
		t.Skipf("SKIP: no usable cgroup layout on this host (%v): the worker runs without a CPU quota here", err)
	}
	s := workerSet(t, WorkerOptions{CPUMillis: 50}, Options{})
	spin := codeMW("spin", 600, `function pre(a) { while (true) {} }`)
	a := &govern.Action{Kind: govern.KindCodeRun, Code: govern.NewCode("python", "x")}
	if v, _ := s.Test(context.Background(), spin, "pre", a, nil); !strings.Contains(v.Error, "time limit exceeded") {
		t.Fatalf("spin: %+v", v)
	}
	p := s.worker.proc
	dir, v2 := cpuCgroupDir(t, p.cmd.Process.Pid)
	if !strings.Contains(dir, cgroupPrefix) {
		t.Fatalf("the worker's cpu cgroup is %s, not its own", dir)
	}
	if v2 {
		if b, _ := os.ReadFile(filepath.Join(dir, "cpu.max")); !strings.HasPrefix(string(b), "5000 100000") {
			t.Fatalf("cpu.max %q, want 5000 100000", b)
		}
	} else if b, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")); strings.TrimSpace(string(b)) != "5000" {
		t.Fatalf("cpu.cfs_quota_us %q, want 5000", b)
	}
	stat, _ := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	throttled := -1
	for _, l := range strings.Split(string(stat), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "nr_throttled" {
			throttled, _ = strconv.Atoi(f[1])
		}
	}
	if throttled <= 0 {
		t.Fatalf("a script spinning for 600 ms was never throttled: cpu.stat %q", stat)
	}
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the worker's cgroup %s is left after Close: %v", dir, err)
	}
	if v, _ := s.Test(context.Background(), spin, "pre", a, nil); v.Action != "error" {
		t.Fatalf("a call after Close: %+v", v)
	}
}

// cpuCgroupDir returns the directory of pid's cgroup in the cpu controller
// and whether it is cgroup v2.
func cpuCgroupDir(t *testing.T, pid int) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	mode, _ := cgroup.Available()
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if mode == cgroup.ModeV2 && f[0] == "0" {
			return filepath.Join("/sys/fs/cgroup", f[2]), true
		}
		if mode == cgroup.ModeV1 && hasCPU(f[1]) {
			return filepath.Join(v1CPUMount(t), f[2]), false
		}
	}
	t.Fatalf("no cpu cgroup in %s", b)
	return "", false
}

func hasCPU(ctrls string) bool {
	for _, c := range strings.Split(ctrls, ",") {
		if c == "cpu" {
			return true
		}
	}
	return false
}

func v1CPUMount(t *testing.T) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+3 < len(fields) && fields[i+1] == "cgroup" && hasCPU(fields[i+3]) {
				return fields[4]
			}
		}
	}
	t.Fatal("no v1 cpu mount")
	return ""
}

// TestWorkerNoCgroup: without a usable cgroup layout the worker runs
// without a CPU quota, and wardend says so once in its log.
func TestWorkerNoCgroup(t *testing.T) {
	old := cgroupAvailable
	cgroupAvailable = func() (cgroup.Mode, error) { return cgroup.ModeNone, errors.New("no cgroup filesystem (test)") }
	t.Cleanup(func() { cgroupAvailable = old })
	logs := &lockedBuf{}
	s := workerSet(t, WorkerOptions{}, Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
	a := &govern.Action{Kind: govern.KindCodeRun, Code: govern.NewCode("python", "x")}
	ok := codeMW("ok", 0, `function pre(a) { return {allow: true}; }`)
	for range 2 {
		if v, _ := s.Test(context.Background(), ok, "pre", a, nil); v.Action != "allow" {
			t.Fatalf("a call without a cgroup: %+v", v)
		}
	}
	if s.worker.proc.cg != nil {
		t.Fatal("the worker has a cgroup")
	}
	if n := strings.Count(logs.String(), "no cgroup for its CPU limit"); n != 1 {
		t.Fatalf("warnings: %d, want 1:\n%s", n, logs)
	}
}
