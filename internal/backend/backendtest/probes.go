package backendtest

// The Probes subtest: docs/probes.md run for real. It builds
// cmd/warden-probe, plants canaries on the host (a token file outside every
// template, TCP/UDP listeners on host loopback, a unix socket and an abstract
// socket, a process that must survive, a sibling sandbox with its own
// canaries), runs the probe inside a tightly limited sandbox as the sandbox's
// user and as its root, fails naming every probe that did not pass, then
// checks the host-side half of each probe: every canary untouched, the
// template unchanged, the clock unchanged, host disk and file handles
// stable, the backend still serving, and nothing left after Delete.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agentclient"
	fspb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
	"github.com/warden-sandbox/warden/internal/backend"
)

// probeLimits are the probed sandbox's limits: tight, so every bomb hits them.
var probeLimits = backend.Limits{MemoryBytes: 128 << 20, Pids: 64, DiskBytes: 64 << 20, CPUMillis: 500}

// probeResult is one line of warden-probe's output.
type probeResult struct {
	ID     int    `json:"id"`
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Skip   bool   `json:"skip"`
	Note   bool   `json:"note"`
	Detail string `json:"detail"`
}

// insideProbes are the probes of probes.md warden-probe checks from inside;
// each must report at least once. 5, 6 and 28 are checked from the host
// here, 26 by the -cpu-hog run judged by the cgroup, 27 by the -kill-all run.
var insideProbes = []int{1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25}

const probePath = "/usr/local/bin/warden-probe"
const setuidPath = "/usr/local/bin/warden-probe-suid"

func testProbes(t *testing.T, f Factory, b backend.Backend) {
	began := time.Now()
	last := began
	phase := func(name string) {
		t.Logf("phase %s: %.1fs", name, time.Since(last).Seconds())
		last = time.Now()
	}
	ctx := context.Background()
	bin := buildProbe(t)
	probe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	c := plantCanaries(t)
	t.Logf("probe built and canaries planted in %.1fs", time.Since(began).Seconds())

	// The sibling: its own canaries, served by warden-probe -serve-sibling.
	sib := Start(t, f, b, nil)
	upload(t, sib, probe)
	sibSecret := "sibling-" + c.token2
	if err := sib.Client.WriteFile(ctx, "/home/user/sibling-secret", "", 0o600, strings.NewReader(sibSecret)); err != nil {
		t.Fatalf("sibling: write secret: %v", err)
	}
	sibArgs := []string{"-ipc-key", strconv.Itoa(c.ipcKey), "-sibling-port", strconv.Itoa(c.sibPort), "-sibling-abstract", c.sibAbstract}
	serveSibling(t, sib, append([]string{"-serve-sibling", "-canary-token", c.token2}, sibArgs...))

	// The probed sandbox.
	s := Start(t, f, b, func(sp *backend.Spec) { sp.Limits = probeLimits })
	upload(t, s, probe)
	s.Sh(t, "root", fmt.Sprintf("cp %s %s && chmod 4755 %s", probePath, setuidPath, setuidPath))
	tmpl := snapshotTemplate(t, f.Spec(t, "probe-template"))

	hostPaths := []string{c.dir, c.file, c.sock}
	hostSockets := []string{c.sock}
	if f.HostPaths != nil {
		for _, h := range []backend.Handle{s.H, sib.H} {
			for _, p := range f.HostPaths(t, h) {
				hostPaths = append(hostPaths, p)
				if st, err := os.Stat(p); err == nil && st.Mode()&fs.ModeSocket != 0 {
					hostSockets = append(hostSockets, p)
				}
			}
		}
	}
	for _, l := range f.Spec(t, "probe-template").Layers {
		if filepath.Clean(l.Path) != filepath.Clean(l.Target) { // the base template shares the host's /usr as /usr, on purpose
			hostPaths = append(hostPaths, l.Path)
		}
	}
	hostname, _ := os.Hostname()
	args := []string{
		"-canary-token", strings.Join(c.tokens(), ","),
		"-host-port", strconv.Itoa(c.tcpPort),
		"-host-udp-port", strconv.Itoa(c.udpPort),
		"-host-abstract", c.abstract,
		"-host-hostname", hostname,
		"-proc-marker", c.sleepMarker + "," + filepath.Base(os.Args[0]) + "," + c.token2,
		"-setuid-bin", setuidPath,
		"-write-nonce", c.nonce,
		"-mem-limit", strconv.FormatInt(probeLimits.MemoryBytes, 10),
		"-pids-limit", strconv.FormatInt(probeLimits.Pids, 10),
		"-disk-limit", strconv.FormatInt(probeLimits.DiskBytes, 10),
		"-cpu-millis", strconv.FormatInt(probeLimits.CPUMillis, 10),
		"-nofile-limit", strconv.FormatInt(probeLimits.WithDefaults().OpenFiles, 10),
	}
	args = append(args, sibArgs...)
	if c.tcp6Port != 0 {
		args = append(args, "-host-port6", strconv.Itoa(c.tcp6Port))
	}
	for _, p := range hostPaths {
		args = append(args, "-host-path", p)
	}
	for _, p := range hostSockets {
		args = append(args, "-host-socket", p)
	}
	for _, tf := range tmpl.targets {
		args = append(args, "-template-file", tf.inside)
	}

	fileNr0 := fileNr()
	disk := watchDisk()
	summary := map[string][]string{}
	for _, user := range []string{"user", "root"} {
		u0, err := b.Usage(ctx, s.H)
		if err != nil {
			t.Fatalf("usage: %v", err)
		}
		t0 := time.Now()
		results := runProbe(t, s, user, args...)
		t.Logf("warden-probe as %s: %d results in %.1fs", user, len(results), time.Since(t0).Seconds())
		judge(t, user, results, summary)
		// The daemon side notices the OOM kills of the memory bombs (probe 23).
		if u, err := b.Usage(ctx, s.H); err != nil {
			t.Errorf("probe 23 (%s): usage after the memory bombs: %v", user, err)
		} else if u.OOMEvents <= u0.OOMEvents {
			t.Errorf("probe 23 (%s): the backend reports no new OOM event after the memory bombs (%d before, %d after)", user, u0.OOMEvents, u.OOMEvents)
		}
	}
	maxDrop := disk.stop()
	phase("setup and probe runs")
	// Probe 26: a CPU hog on every core, judged by the host's account.
	cpuHog(t, b, s)
	phase("cpu hog")
	// Host-side probes 5 and 6 through the agent's file API.
	testTarSlip(t, s, c)
	testFileAPIEscapes(t, s, c)
	phase("tar slip and file API")
	// Probe 27 last: kill(-1, SIGKILL) from inside, as user and as root.
	for _, user := range []string{"user", "root"} {
		results := runProbe(t, s, user, "-kill-all")
		judgeKillAll(t, user, results)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.Client.Health(hctx)
		cancel()
		if err != nil {
			t.Errorf("probe 27 (%s): the agent does not answer after kill(-1, SIGKILL): %v", user, err)
			continue
		}
		if st, err := b.Status(ctx, s.H); err != nil || st != backend.StateRunning {
			t.Errorf("probe 27 (%s): status after kill(-1, SIGKILL) = %q, %v; want running", user, st, err)
		}
		s.Sh(t, user, "echo still-serving")
	}

	phase("kill-all")
	// Probe 23, memfd: in a sandbox of its own, since it may take it down.
	m := memfdBomb(t, f, b, probe)
	phase("memfd bomb")
	// The host's half.
	c.verify(t)
	tmpl.verify(t)
	// The disk fill writes four times the limit when it does not hold.
	if f.HostDisk != nil {
		// What the sandbox's own storage takes on the host: the limit plus
		// the filesystem's metadata, whatever the rest of the host writes
		// meanwhile (the whole test suite runs packages side by side).
		var alloc int64
		files := f.HostDisk(t, s.H)
		for _, p := range files {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Errorf("probe 24: stat %s: %v", p, err)
				continue
			}
			alloc += st.Blocks * 512
		}
		if limit := 2*probeLimits.DiskBytes + 32<<20; alloc > limit {
			t.Errorf("probe 24: the sandbox's storage on the host (%v) takes %d MiB after the disk fill (disk limit %d MiB)", files, alloc>>20, probeLimits.DiskBytes>>20)
		} else {
			t.Logf("probe 24: the sandbox's storage on the host (%d files) takes %.1f MiB after the disk fill (disk limit %d MiB); the host's free space dropped by at most %.1f MiB meanwhile, other processes included", len(files), float64(alloc)/(1<<20), probeLimits.DiskBytes>>20, float64(maxDrop)/(1<<20))
		}
	} else if maxDrop > 3*probeLimits.DiskBytes {
		// Other processes on the host write too, hence the slack.
		t.Errorf("probe 24: host free space dropped by %d MiB while the probes ran (disk limit %d MiB)", maxDrop>>20, probeLimits.DiskBytes>>20)
	} else {
		t.Logf("probe 24: host free space dropped by at most %.1f MiB while the probes ran", float64(maxDrop)/(1<<20))
	}
	if fileNr0 > 0 {
		if n := fileNr(); n-fileNr0 > probeFDSlack {
			t.Errorf("probe 25: host open files grew from %d to %d", fileNr0, n)
		}
	}
	// The sibling (probes 20 and 22): alive, its canaries intact, its files untouched.
	checkSibling(t, sib, append([]string{"-check-sibling"}, sibArgs...))
	if got := readAll(t, sib.Client, "/home/user/sibling-secret", ""); got != sibSecret {
		t.Errorf("probe 20: the sibling's file changed: %q", got)
	}
	phase("host checks and sibling")
	// The backend still serves: a fresh sandbox starts and runs.
	fresh := Start(t, f, b, nil)
	fresh.Sh(t, "", "echo fresh")
	// Probe 28: nothing left after Delete.
	for _, x := range []*Sandbox{s, sib, m, fresh} {
		if err := b.Delete(ctx, x.H); err != nil {
			t.Errorf("probe 28: delete %s: %v", x.H.ID, err)
		}
		if left := f.Leftovers(t, x.H.ID); len(left) > 0 {
			t.Errorf("probe 28: leftovers of %s after delete: %v", x.H.ID, left)
		}
	}
	c.verifyAfterDelete(t)
	phase("fresh sandbox, delete, leftovers")
	var ids []string
	for k := range summary {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	for _, k := range ids {
		t.Logf("%s: %s", k, strings.Join(summary[k], ", "))
	}
	t.Logf("Probes took %.1fs", time.Since(began).Seconds())
}

// probeFDSlack is how far the host's allocated file count may move while the
// probes run (other processes on the host open files too); an fd leak of the
// exhaustion probe would be about RLIMIT_NOFILE (4096 by default).
const probeFDSlack = 2048

func buildProbe(t *testing.T) string {
	t.Helper()
	if pre := os.Getenv("WARDEN_TEST_PROBE"); pre != "" {
		return pre // prebuilt (scripts/cgroup2-vm.sh: the VM has no Go toolchain)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "warden-probe")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/warden-sandbox/warden/cmd/warden-probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build warden-probe: %v\n%s", err, out)
	}
	return bin
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func upload(t *testing.T, s *Sandbox, probe []byte) {
	t.Helper()
	if err := s.Client.WriteFile(context.Background(), probePath, "root", 0o755, bytes.NewReader(probe)); err != nil {
		t.Fatalf("upload warden-probe: %v", err)
	}
}

// runProbe runs warden-probe in s as user and parses its JSON lines.
func runProbe(t *testing.T, s *Sandbox, user string, args ...string) []probeResult {
	t.Helper()
	results, err := tryProbe(t, s, user, args...)
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// tryProbe is runProbe returning an error when the agent stops answering.
func tryProbe(t *testing.T, s *Sandbox, user string, args ...string) ([]probeResult, error) {
	t.Helper()
	// An emulated VM (scripts/cgroup2-vm.sh) runs many times slower: time
	// budgets, the probe's own included, stretch by WARDEN_TEST_TIME_SCALE.
	if ts := timeScale(); ts > 1 {
		args = append(slices.Clone(args), "-time-scale", strconv.FormatFloat(ts, 'f', -1, 64))
	}
	ctx, cancel := context.WithTimeout(context.Background(), scaled(3*time.Minute))
	defer cancel()
	var out, errb bytes.Buffer
	res, err := s.Client.Run(ctx, agentclient.Cmd{Args: append([]string{probePath}, args...), User: user, Stdout: &out, Stderr: &errb})
	if err != nil {
		return nil, fmt.Errorf("run warden-probe as %s: %w\nstdout: %s\nstderr: %s", user, err, out.String(), errb.String())
	}
	var results []probeResult
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			t.Logf("warden-probe (%s) said: %s", user, line)
			continue
		}
		var r probeResult
		if err := json.Unmarshal(line, &r); err != nil {
			t.Errorf("warden-probe (%s): bad line %q: %v", user, line, err)
			continue
		}
		results = append(results, r)
	}
	if res.ExitCode != 0 || errb.Len() > 0 {
		t.Logf("warden-probe (%s) exit %d (%s); stderr: %s", user, res.ExitCode, res.Status, errb.String())
	}
	return results, nil
}

// memfdBomb runs probe 23's memfd bomb in a sandbox of its own. Pages
// written into a memfd are charged to the sandbox's cgroup but count in no
// process's RSS, so without care the OOM killer would choose the agent (the
// largest process) and the whole sandbox would end. The OOM must stay
// inside the sandbox's cgroup, be reported, and take a user process, not
// the agent: the sandbox keeps serving.
func memfdBomb(t *testing.T, f Factory, b backend.Backend, probe []byte) *Sandbox {
	t.Helper()
	ctx := context.Background()
	m := Start(t, f, b, func(sp *backend.Spec) { sp.Limits = probeLimits })
	upload(t, m, probe)
	results, err := tryProbe(t, m, "user", "-memfd-bomb", "-mem-limit", strconv.FormatInt(probeLimits.MemoryBytes, 10))
	u, uerr := b.Usage(ctx, m.H)
	switch {
	case uerr != nil:
		t.Errorf("probe 23 memfd: usage after the bomb: %v", uerr)
	case u.OOMEvents < 1:
		t.Errorf("probe 23 memfd: the backend reports %d OOM events after the memfd bomb", u.OOMEvents)
	}
	if err == nil {
		for _, r := range results {
			if r.ID == 23 && !r.Pass {
				t.Errorf("probe 23 %s FAILED: %s", r.Name, r.Detail)
			} else if r.ID == 23 {
				t.Logf("probe 23 %s: %s", r.Name, r.Detail)
			}
		}
		if len(results) == 0 {
			t.Error("probe 23 memfd reported nothing")
		}
		return m
	}
	// The agent went down with the bomb: the daemon must notice and say why.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	es, werr := b.Wait(wctx, m.H)
	st, serr := b.Status(ctx, m.H)
	if werr != nil || serr != nil || st != backend.StateStopped {
		t.Errorf("probe 23 memfd: the agent stopped answering (%v) but the backend reports %q (%v, %v)", err, st, werr, serr)
		return m
	}
	t.Errorf("probe 23 memfd: the OOM killer took the agent and the sandbox ended (%s, %d OOM events): user processes must be the preferred victims", es.Reason, u.OOMEvents)
	return m
}

// allowedSkips are the checks warden-probe may skip in this suite, with why.
// Every other skip fails the test: the suite passes every flag, so a skip
// means a check silently did not run.
var allowedSkips = map[string]string{
	"sibling-ip":      "the suite attaches no network, so sandboxes have no address to dial",
	"setuid-template": "the template has no setuid-root binary to try",
}

// judge fails the test for every probe that did not pass, for every skip
// not in allowedSkips, and for every probe that reported nothing. A skip is
// recorded as "skip", never as "pass".
func judge(t *testing.T, user string, results []probeResult, summary map[string][]string) {
	t.Helper()
	seen := map[int]bool{}
	complete := false
	for _, r := range results {
		seen[r.ID] = true
		switch {
		case r.ID == 0 && r.Name == "complete":
			complete = r.Pass
			t.Logf("warden-probe (%s): %s", user, r.Detail)
		case r.Skip && r.Pass:
			t.Errorf("probe %d %s as %s is both skipped and passed (a skip is never a pass): %s", r.ID, r.Name, user, r.Detail)
		case r.Skip && allowedSkips[r.Name] != "":
			t.Logf("SKIP probe %d %s (%s): %s (allowed: %s)", r.ID, r.Name, user, r.Detail, allowedSkips[r.Name])
		case r.Skip:
			t.Errorf("probe %d %s was SKIPPED as %s, which this suite does not allow (it gives every flag): %s", r.ID, r.Name, user, r.Detail)
		case !r.Pass:
			t.Errorf("probe %d %s FAILED as %s: %s", r.ID, r.Name, user, r.Detail)
		case testing.Verbose():
			t.Logf("probe %d %s passed as %s: %s", r.ID, r.Name, user, r.Detail)
		}
		k := fmt.Sprintf("probe %02d (%s)", r.ID, user)
		if r.ID != 0 {
			v := "pass"
			switch {
			case r.Skip:
				v = "skip"
			case r.Note:
				v = "note"
			case !r.Pass:
				v = "FAIL"
			}
			summary[k] = append(summary[k], r.Name+"="+v)
		}
	}
	if !complete {
		t.Errorf("warden-probe as %s did not complete (it died or refused; see the log)", user)
	}
	for _, id := range insideProbes {
		if !seen[id] {
			t.Errorf("probe %d reported nothing as %s", id, user)
		}
	}
}

// cpuHog is probe 26: warden-probe -cpu-hog keeps every CPU the sandbox sees
// busy for 2 s; the sandbox's CPU time as the backend's host cgroup counts it
// (which holds the sentry and gofer under gvisor) over the host's wall time
// of the run must stay within the limit, with a quarter and 0.05 CPU slack
// for the CFS period and the agent. The inside view is only logged: gVisor's
// sampled per-task clock overcounts on a loaded host.
func cpuHog(t *testing.T, b backend.Backend, s *Sandbox) {
	t.Helper()
	ctx := context.Background()
	allowed := float64(probeLimits.CPUMillis) / 1000
	bound := allowed*1.25 + 0.05
	if float64(runtime.NumCPU()) <= bound {
		t.Logf("SKIP probe 26 cpu-hog: this host has %d CPUs, not more than the bound %.2f; nothing to tell apart", runtime.NumCPU(), bound)
		return
	}
	for _, user := range []string{"user", "root"} {
		u0, err := b.Usage(ctx, s.H)
		if err != nil {
			t.Fatalf("probe 26: usage: %v", err)
		}
		t0 := time.Now()
		results := runProbe(t, s, user, "-cpu-hog", "-cpu-millis", strconv.FormatInt(probeLimits.CPUMillis, 10))
		wall := time.Since(t0)
		u1, err := b.Usage(ctx, s.H)
		if err != nil {
			t.Fatalf("probe 26: usage: %v", err)
		}
		inside := "no report"
		for _, r := range results {
			if r.ID == 26 {
				inside = r.Detail
			}
		}
		if u0.CPUNanos < 0 || u1.CPUNanos < 0 {
			t.Errorf("probe 26 (%s): the backend reports no CPU time, so the limit cannot be checked", user)
			continue
		}
		used := float64(u1.CPUNanos-u0.CPUNanos) / float64(wall.Nanoseconds())
		detail := fmt.Sprintf("the sandbox's cgroup used %.2f CPUs over %s; limit %.2f (bound %.2f); %s", used, wall.Round(time.Millisecond), allowed, bound, inside)
		if used > bound {
			t.Errorf("probe 26 cpu-hog FAILED as %s: %s", user, detail)
		} else {
			t.Logf("probe 26 cpu-hog passed as %s: %s", user, detail)
		}
		if wall < 2*time.Second {
			t.Errorf("probe 26 (%s): the run took %s, less than the 2 s hog: %s", user, wall, inside)
		}
	}
}

func judgeKillAll(t *testing.T, user string, results []probeResult) {
	t.Helper()
	found := false
	for _, r := range results {
		if r.ID != 27 {
			continue
		}
		found = true
		if !r.Pass {
			t.Errorf("probe 27 %s FAILED as %s: %s", r.Name, user, r.Detail)
		} else {
			t.Logf("probe 27 %s as %s: %s", r.Name, user, r.Detail)
		}
	}
	if !found {
		t.Errorf("probe 27 reported nothing as %s (did kill(-1) kill the probe itself?)", user)
	}
}

func serveSibling(t *testing.T, sib *Sandbox, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := sib.Client.Start(ctx, agentclient.Cmd{Args: append([]string{probePath}, args...), User: "user", Tag: "sibling-canaries"})
	if err != nil {
		cancel()
		t.Fatalf("sibling: start canaries: %v", err)
	}
	t.Cleanup(func() { cancel(); stream.Close() })
	ready := make(chan string, 1)
	go func() {
		var got strings.Builder
		for stream.Receive() {
			if d := stream.Msg().GetEvent().GetData(); d != nil {
				got.Write(d.GetStdout())
				if strings.Contains(got.String(), "ready\n") || strings.Contains(got.String(), "error") {
					break
				}
			}
			if stream.Msg().GetEvent().GetEnd() != nil {
				break
			}
		}
		ready <- got.String()
	}()
	select {
	case got := <-ready:
		if !strings.Contains(got, "ready\n") {
			t.Fatalf("sibling: canaries not set up: %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sibling: canaries not ready after 20s")
	}
}

func checkSibling(t *testing.T, sib *Sandbox, args []string) {
	t.Helper()
	results := runProbe(t, sib, "user", args...)
	n := 0
	for _, r := range results {
		if r.ID == 0 {
			continue
		}
		n++
		if !r.Pass {
			t.Errorf("probe 20: the sibling's canary %s is gone (so the probed sandbox may have reached it, or it never existed): %s", r.Name, r.Detail)
		}
	}
	if n == 0 {
		t.Error("probe 20: the sibling check reported nothing")
	}
}

func readAll(t *testing.T, c *agentclient.Client, path, user string) string {
	t.Helper()
	r, err := c.ReadFile(context.Background(), path, user)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// canaries planted on the host.
type canaries struct {
	token, token2 string // host token, sibling token
	nonce         string
	dir, file     string // the token file, outside every template
	fileSum       [32]byte
	sock          string // a unix listener in dir
	abstract      string // an abstract unix listener (without '@')
	tcpPort       int
	tcp6Port      int
	udpPort       int
	ipcKey        int
	sibPort       int
	sibAbstract   string
	sleepMarker   string
	sleep         *exec.Cmd
	sleepDone     chan struct{}
	inotify       int
	hits          atomic.Int64
	mu            sync.Mutex
	hitLog        []string
	closers       []io.Closer
	wallStart     time.Time
	hostMachineID string
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func plantCanaries(t *testing.T) *canaries {
	t.Helper()
	c := &canaries{token: "wardencanary" + randHex(16), token2: "wardensibling" + randHex(16), nonce: randHex(6), wallStart: time.Now()}
	// The token file: in /root when it can (the host's most private home),
	// world-readable so only isolation keeps it from the sandbox.
	base := ""
	if st, err := os.Stat("/root"); err == nil && st.IsDir() && os.Geteuid() == 0 {
		base = "/root"
	}
	dir, err := os.MkdirTemp(base, ".warden-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	c.dir = dir
	c.file = filepath.Join(dir, c.token+".secret")
	body := []byte("warden host canary " + c.token + "\n")
	if err := os.WriteFile(c.file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	c.fileSum = sha256.Sum256(body)
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && len(bytes.TrimSpace(b)) >= 16 {
		c.hostMachineID = string(bytes.TrimSpace(b))
	}
	// Listeners on host loopback that record every connection.
	record := func(what string) {
		c.hits.Add(1)
		c.mu.Lock()
		c.hitLog = append(c.hitLog, what)
		c.mu.Unlock()
	}
	serve := func(ln net.Listener, what string) {
		c.closers = append(c.closers, ln)
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				record(what + " from " + conn.RemoteAddr().String())
				conn.Close()
			}
		}()
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.tcpPort = ln.Addr().(*net.TCPAddr).Port
	serve(ln, "tcp 127.0.0.1")
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		c.tcp6Port = ln6.Addr().(*net.TCPAddr).Port
		serve(ln6, "tcp ::1")
	} else {
		t.Logf("no IPv6 loopback on the host (%v): the ::1 canary is not planted", err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.udpPort = pc.LocalAddr().(*net.UDPAddr).Port
	c.closers = append(c.closers, pc)
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			record("udp 127.0.0.1 from " + from.String())
		}
	}()
	c.sock = filepath.Join(dir, "api.sock")
	uln, err := net.Listen("unix", c.sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(c.sock, 0o666)
	serve(uln, "unix "+c.sock)
	c.abstract = "warden-canary-" + c.nonce
	aln, err := net.Listen("unix", "@"+c.abstract)
	if err != nil {
		t.Fatal(err)
	}
	serve(aln, "abstract @"+c.abstract)
	// Sibling canary coordinates.
	var kb [4]byte
	rand.Read(kb[:])
	c.ipcKey = int(uint32(kb[0])<<16|uint32(kb[1])<<8|uint32(kb[2])) + 0x1000
	c.sibPort = 20000 + int(kb[3])*100 + int(kb[2]%100)
	c.sibAbstract = "warden-sibling-" + c.nonce
	// A host process that must survive.
	c.sleepMarker = fmt.Sprintf("3600.%d", 100000+int(kb[0])<<8|int(kb[1]))
	c.sleep = exec.Command("sleep", c.sleepMarker)
	if err := c.sleep.Start(); err != nil {
		t.Fatalf("start host canary process: %v", err)
	}
	c.sleepDone = make(chan struct{})
	go func() { c.sleep.Wait(); close(c.sleepDone) }()
	t.Cleanup(func() {
		c.sleep.Process.Kill()
		<-c.sleepDone
		for _, cl := range c.closers {
			cl.Close()
		}
	})
	// Watch the token file's directory: any open, read, listing or change
	// by anyone is recorded by the kernel.
	c.inotify, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(c.inotify) })
	if _, err := unix.InotifyAddWatch(c.inotify, dir, unix.IN_ACCESS|unix.IN_OPEN|unix.IN_MODIFY|unix.IN_ATTRIB|
		unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatalf("inotify watch: %v", err)
	}
	return c
}

// tokens are the strings that must be found nowhere inside the probed sandbox.
func (c *canaries) tokens() []string {
	t := []string{c.token, c.token2}
	if c.hostMachineID != "" {
		t = append(t, c.hostMachineID)
	}
	return t
}

// inotifyEvents drains the watch; the names of whatever touched the directory.
func (c *canaries) inotifyEvents() []string {
	var out []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(c.inotify, buf)
		if n <= 0 || err != nil {
			return out
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				name = strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			}
			out = append(out, fmt.Sprintf("mask %#x on %q", ev.Mask, name))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

func (c *canaries) verify(t *testing.T) {
	t.Helper()
	// First the watch (our own checks below open the file).
	if ev := c.inotifyEvents(); len(ev) > 0 {
		t.Errorf("probe 1: the host canary directory %s was touched while the probes ran: %v", c.dir, ev)
	}
	b, err := os.ReadFile(c.file)
	if err != nil || sha256.Sum256(b) != c.fileSum {
		t.Errorf("probe 1: the host canary file changed or vanished: %v", err)
	}
	ents, _ := os.ReadDir(c.dir)
	c.inotifyEvents() // our own reads, just now
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("probe 1/6: the host canary directory holds %v, want only the token file and the socket", names)
	}
	if n := c.hits.Load(); n > 0 {
		c.mu.Lock()
		t.Errorf("probes 19/21: %d connections reached host canaries: %v", n, c.hitLog)
		c.mu.Unlock()
	}
	select {
	case <-c.sleepDone:
		t.Errorf("probes 22/27: the host canary process died: %v", c.sleep.ProcessState)
	default:
		if err := c.sleep.Process.Signal(unix.Signal(0)); err != nil {
			t.Errorf("probes 22/27: the host canary process is gone: %v", err)
		}
	}
	// The host clock (probe 14): wall time advanced as the monotonic clock did.
	mono := time.Since(c.wallStart)
	wall := time.Now().Round(0).Sub(c.wallStart.Round(0))
	if d := wall - mono; d > time.Second || d < -time.Second {
		t.Errorf("probe 14: the host wall clock moved by %s relative to the monotonic clock", d)
	}
}

func (c *canaries) verifyAfterDelete(t *testing.T) {
	t.Helper()
	if ev := c.inotifyEvents(); len(ev) > 0 {
		t.Errorf("probe 1: the host canary directory was touched: %v", ev)
	}
	if n := c.hits.Load(); n > 0 {
		t.Errorf("probes 19/21: connections reached host canaries: %d", n)
	}
	select {
	case <-c.sleepDone:
		t.Error("probe 28: deleting the sandboxes killed the host canary process")
	default:
	}
}

// template is the host side of probe 2: what the template's layers looked
// like before the probes, and the files the probe will try to modify.
type template struct {
	rootSum string // digest of the whole "/" layer
	rootDir string
	targets []templateFile
}

type templateFile struct {
	host, inside string
	sum          string
}

func snapshotTemplate(t *testing.T, spec backend.Spec) *template {
	t.Helper()
	tm := &template{}
	for _, l := range spec.Layers {
		if l.Target == "/" && tm.rootDir == "" {
			tm.rootDir = l.Path
			sum, err := treeDigest(l.Path)
			if err != nil {
				t.Fatalf("digest template layer %s: %v", l.Path, err)
			}
			tm.rootSum = sum
		}
		if f, ok := pickTemplateFile(l.Path); ok {
			inside := filepath.Join(l.Target, f)
			host := filepath.Join(l.Path, f)
			tm.targets = append(tm.targets, templateFile{host: host, inside: inside, sum: fileDigest(host)})
		}
	}
	if len(tm.targets) == 0 {
		t.Fatal("probe 2: found no template file to target")
	}
	return tm
}

// pickTemplateFile returns a small root-owned regular file of a layer,
// relative to it, preferring etc/ and share/ over executables.
func pickTemplateFile(layer string) (string, bool) {
	for _, sub := range []string{"etc", "share/doc", "share", "lib", ""} {
		var found string
		root := filepath.Join(layer, sub)
		n := 0
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			n++
			if err != nil || found != "" || n > 5000 {
				return filepath.SkipAll
			}
			if !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil || fi.Size() == 0 || fi.Size() > 64<<10 || fi.Mode().Perm()&0o111 != 0 || fi.Mode().Perm()&0o022 != 0 {
				return nil
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
				return nil
			}
			found = p
			return filepath.SkipAll
		})
		if found != "" {
			rel, _ := filepath.Rel(layer, found)
			return rel, true
		}
	}
	return "", false
}

func fileDigest(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// treeDigest hashes names, types, modes, owners, link targets and contents.
func treeDigest(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(h, "%s\x00%o\x00%d:%d\x00%d\x00", strings.TrimPrefix(p, root), fi.Mode(), st.Uid, st.Gid, fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			io.WriteString(h, l)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			io.Copy(h, f)
			f.Close()
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func (tm *template) verify(t *testing.T) {
	t.Helper()
	if tm.rootDir != "" {
		if sum, err := treeDigest(tm.rootDir); err != nil || sum != tm.rootSum {
			t.Errorf("probe 2: the template's root layer %s changed (%v)", tm.rootDir, err)
		}
	}
	for _, f := range tm.targets {
		if got := fileDigest(f.host); got != f.sum {
			t.Errorf("probe 2: template file %s changed on the host", f.host)
		}
		ents, _ := os.ReadDir(filepath.Dir(f.host))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "warden-probe") {
				t.Errorf("probe 2: %s appeared on the host", filepath.Join(filepath.Dir(f.host), e.Name()))
			}
		}
	}
}

// diskWatch samples host free space while the probes run (probe 24).
type diskWatch struct {
	stopc   chan struct{}
	done    chan struct{}
	maxDrop int64
}

func freeBytes(p string) (int64, uint64) {
	var sf unix.Statfs_t
	if unix.Statfs(p, &sf) != nil {
		return -1, 0
	}
	return int64(sf.Bavail) * sf.Bsize, uint64(sf.Fsid.Val[0])<<32 | uint64(uint32(sf.Fsid.Val[1]))
}

func watchDisk() *diskWatch {
	w := &diskWatch{stopc: make(chan struct{}), done: make(chan struct{})}
	paths := []string{"/", os.TempDir(), "/var"}
	base := map[uint64]int64{}
	for _, p := range paths {
		if free, id := freeBytes(p); free >= 0 {
			base[id] = free
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range paths {
				if free, id := freeBytes(p); free >= 0 {
					if d := base[id] - free; d > w.maxDrop {
						w.maxDrop = d
					}
				}
			}
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *diskWatch) stop() int64 {
	close(w.stopc)
	<-w.done
	return w.maxDrop
}

// fileNr is the host's count of allocated file handles.
func fileNr() int64 {
	best := int64(-1)
	for i := 0; i < 3; i++ {
		b, err := os.ReadFile("/proc/sys/fs/file-nr")
		if err != nil {
			return -1
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil && (best < 0 || n < best) {
				best = n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return best
}

// testTarSlip is probe 5: hostile tar entries are refused by name and land
// nowhere outside the target directory.
func testTarSlip(t *testing.T, s *Sandbox, c *canaries) {
	t.Helper()
	ctx := context.Background()
	type entry struct {
		hdr  tar.Header
		body string
	}
	reg := func(name string) entry {
		return entry{hdr: tar.Header{Name: name, Mode: 0o644, Size: 5, Typeflag: tar.TypeReg}, body: "pwned"}
	}
	cases := []struct {
		name    string
		entries []entry
		bad     string // the entry the error must name
	}{
		{"dotdot", []entry{reg("../slip-dotdot")}, "../slip-dotdot"},
		{"deep-dotdot", []entry{reg("a/../../../slip-deep")}, "a/../../../slip-deep"},
		{"absolute", []entry{reg("/etc/slip-abs")}, "/etc/slip-abs"},
		{"symlink-host", []entry{{hdr: tar.Header{Name: "l", Linkname: c.dir, Typeflag: tar.TypeSymlink}}, reg("l/slip-host")}, "l/slip-host"},
		{"symlink-etc", []entry{{hdr: tar.Header{Name: "l", Linkname: "/etc", Typeflag: tar.TypeSymlink}}, reg("l/slip-etc")}, "l/slip-etc"},
		{"symlink-up", []entry{{hdr: tar.Header{Name: "l", Linkname: "../../..", Typeflag: tar.TypeSymlink}}, reg("l/tmp/slip-up")}, "l/tmp/slip-up"},
		{"hardlink-out", []entry{{hdr: tar.Header{Name: "h", Linkname: "../../../etc/passwd", Typeflag: tar.TypeLink}}}, "h"},
		{"hardlink-abs", []entry{{hdr: tar.Header{Name: "h", Linkname: "/etc/shadow", Typeflag: tar.TypeLink}}}, "h"},
		{"hardlink-via-symlink", []entry{{hdr: tar.Header{Name: "l", Linkname: "/etc", Typeflag: tar.TypeSymlink}}, {hdr: tar.Header{Name: "h", Linkname: "l/passwd", Typeflag: tar.TypeLink}}}, "h"},
		{"char-device", []entry{{hdr: tar.Header{Name: "mem", Mode: 0o666, Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}}}, "mem"},
		{"block-device", []entry{{hdr: tar.Header{Name: "sda", Mode: 0o666, Typeflag: tar.TypeBlock, Devmajor: 8, Devminor: 0}}}, "sda"},
		{"fifo", []entry{{hdr: tar.Header{Name: "fifo", Mode: 0o666, Typeflag: tar.TypeFifo}}}, "fifo"},
	}
	refused, example := 0, ""
	for _, user := range []string{"user", "root"} {
		for i, tc := range cases {
			dir := fmt.Sprintf("/home/user/tarslip-%s-%d", user, i)
			var tb bytes.Buffer
			tw := tar.NewWriter(&tb)
			for _, e := range tc.entries {
				h := e.hdr
				tw.WriteHeader(&h)
				if e.body != "" {
					tw.Write([]byte(e.body))
				}
			}
			tw.Close()
			err := s.Client.Upload(ctx, dir, user, &tb)
			refused++
			if i == 0 && user == "user" && err != nil {
				example = err.Error()
			}
			switch {
			case err == nil:
				t.Errorf("probe 5 (%s): tar with %s was accepted", user, tc.name)
			case !strings.Contains(err.Error(), strconv.Quote(tc.bad)) && !strings.Contains(err.Error(), tc.bad):
				t.Errorf("probe 5 (%s): tar with %s refused, but the error does not name entry %q: %v", user, tc.name, tc.bad, err)
			}
		}
		// Setuid bits are dropped.
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "suid", Mode: 0o6755, Size: 2, Typeflag: tar.TypeReg})
		tw.Write([]byte("#!"))
		tw.Close()
		dir := "/home/user/tarslip-suid-" + user
		if err := s.Client.Upload(ctx, dir, user, &tb); err != nil {
			t.Errorf("probe 5 (%s): upload of a setuid file: %v", user, err)
		} else if got := s.Sh(t, user, "stat -c %a "+dir+"/suid"); strings.TrimSpace(got) != "755" {
			t.Errorf("probe 5 (%s): uploaded setuid file has mode %s, want 755", user, strings.TrimSpace(got))
		}
	}
	// Nothing landed outside the targets.
	out := s.Sh(t, "root", "for p in /home/slip-dotdot /home/user/slip-dotdot /slip-deep /home/slip-deep /etc/slip-abs /etc/slip-etc /tmp/slip-up /slip-abs; do [ -e $p ] && echo $p; done; true")
	if strings.TrimSpace(out) != "" {
		t.Errorf("probe 5: tar entries landed outside their target: %s", out)
	}
	if got := s.Sh(t, "root", "find / -xdev -name 'slip-*' 2>/dev/null | grep -v '^/proc' ; true"); strings.TrimSpace(got) != "" {
		t.Errorf("probe 5: tar entries landed outside their target: %s", got)
	}
	if fileExists(filepath.Join(c.dir, "slip-host")) {
		t.Errorf("probe 5: a tar entry landed in the host directory %s", c.dir)
	}
	t.Logf("probe 5: %d hostile archives tried as user and root (e.g. %s)", refused, example)
}

// testFileAPIEscapes is probe 6: the file API does not follow symlinks the
// sandbox made out of the sandbox.
func testFileAPIEscapes(t *testing.T, s *Sandbox, c *canaries) {
	t.Helper()
	ctx := context.Background()
	hostname := strings.TrimSpace(s.Sh(t, "", "cat /etc/hostname"))
	hostHostname, _ := os.ReadFile("/etc/hostname")
	s.Sh(t, "user", fmt.Sprintf("cd /home/user && ln -sfn / l-root && ln -sfn /proc/1/root l-proc1 && ln -sfn %s l-canary && ln -sfn %s l-canary-file", c.dir, c.file))
	for _, user := range []string{"user", "root"} {
		for _, p := range []string{"/home/user/l-canary-file", "/home/user/l-canary/" + filepath.Base(c.file), "/home/user/l-root" + c.file, "/home/user/l-proc1" + c.file} {
			if r, err := s.Client.ReadFile(ctx, p, user); err == nil {
				b, _ := io.ReadAll(r)
				r.Close()
				t.Errorf("probe 6 (%s): read %s through a symlink: %q", user, p, b)
			}
		}
		for _, p := range []string{"/home/user/l-root/etc/hostname", "/home/user/l-proc1/etc/hostname"} {
			r, err := s.Client.ReadFile(ctx, p, user)
			if err != nil {
				continue // refused: fine
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if got := strings.TrimSpace(string(b)); got != hostname {
				t.Errorf("probe 6 (%s): %s read %q, want the sandbox's own hostname %q (the host's is %q)", user, p, got, hostname, bytes.TrimSpace(hostHostname))
			}
		}
		if err := s.Client.WriteFile(ctx, "/home/user/l-canary/written-"+user, user, 0o644, strings.NewReader("pwned")); err == nil {
			t.Errorf("probe 6 (%s): wrote through a symlink to a host directory", user)
		}
		if _, err := s.Client.FS.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/home/user/l-canary"})); err == nil {
			t.Errorf("probe 6 (%s): listed a host directory through a symlink", user)
		}
		if rc, err := s.Client.Download(ctx, "/home/user/l-canary", user); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if bytes.Contains(b, []byte(c.token)) {
				t.Errorf("probe 6 (%s): downloaded the host canary through a symlink", user)
			}
		}
	}
	if fileExists(filepath.Join(c.dir, "written-user")) || fileExists(filepath.Join(c.dir, "written-root")) {
		t.Errorf("probe 6: the file API wrote into the host directory %s", c.dir)
	}
}
