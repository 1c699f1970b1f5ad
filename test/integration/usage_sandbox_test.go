package integration

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// cgroupCPUNanos reads sandbox id's CPU time straight from its cgroup on
// the host: cgroup v1's cpuacct.usage, or v2's cpu.stat usage_usec.
func cgroupCPUNanos(t *testing.T, id string) int64 {
	t.Helper()
	if m, _ := filepath.Glob("/sys/fs/cgroup/cpuacct/warden/*" + id + "/cpuacct.usage"); len(m) == 1 {
		b, err := os.ReadFile(m[0])
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		return v
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/warden/*" + id + "/cpu.stat"); len(m) == 1 {
		b, err := os.ReadFile(m[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", m[0], err)
				}
				return n * 1000
			}
		}
		t.Fatalf("%s has no usage_usec:\n%s", m[0], b)
	}
	t.Fatalf("no cgroup CPU counter for sandbox %s on this host (neither v1 cpuacct nor v2 cpu.stat)", id)
	return 0
}

// TestSandboxUsage (issue 22, done-when): through the real daemon, a
// sandbox burns CPU for about 2 s; /v1/usage's CPU-seconds for it match
// its cgroup's own counter (read from the host) within 5%, and both are
// plausible against the known load; its paused seconds are the time it
// was paused; its memory GiB-seconds are plausible against 128 MiB it
// holds; its egress bytes are the UDP payload it sent; the figures survive its end (the final reading is taken before
// its cgroup goes) and show in the CLI, the CSV and /metrics.
func TestSandboxUsage(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ndaemon log:\n%s", append(args, d.log)...)
	}
	// A network that lets UDP out to a documentation range: datagrams to
	// it are relayed (and counted) whether or not anything answers.
	pol := &warden.NetworkPolicy{Mode: "allowlist", Allow: []warden.NetworkRule{{CIDR: "203.0.113.0/24", Ports: []int{9}}}}
	sb := create(t, c, warden.CreateSandboxRequest{MemoryMB: 512, Network: pol})
	// 40 datagrams of 1000 bytes out; 128 MiB in the sandbox's tmpfs
	// (charged to its memory cgroup); then a busy loop for 2 s of wall time.
	const udpBytes = 40 * 1000
	var out bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "python3 -c \"import socket,time\n" +
		"s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor _ in range(40):\n    s.sendto(b'x'*1000, ('203.0.113.7', 9)); time.sleep(0.005)\" && " +
		"dd if=/dev/zero of=/tmp/blob bs=1M count=128 2>/dev/null && " +
		"timeout 2 sh -c 'while :; do :; done'; echo done"}, warden.ExecIO{Stdout: &out})
	if err != nil || !strings.Contains(out.String(), "done") {
		fail("load: %v %+v %q", err, res, out.String())
	}
	report := func(q warden.UsageQuery) warden.UsageRow {
		t.Helper()
		rep, err := c.LLMUsage(ctx, q)
		if err != nil {
			fail("usage: %v", err)
		}
		for _, r := range rep.Rows {
			if r.Key == sb.ID || q.GroupBy != "sandbox" {
				return r
			}
		}
		return warden.UsageRow{}
	}
	bySandbox := warden.UsageQuery{GroupBy: "sandbox", Sandbox: sb.ID, Since: "1h"}
	within := func(got, want, frac float64) bool { return math.Abs(got-want) <= frac*want }

	// Paused: the meter reads it at once (the pause), and its cgroup's
	// counter stands still.
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		fail("pause: %v", err)
	}
	pausedAt := time.Now()
	cg := float64(cgroupCPUNanos(t, sb.ID)) / 1e9
	// The known load: at most 2 s of one core plus the boot and the dd;
	// at least a fraction of it on a machine shared with other work.
	if cg < 0.4 || cg > 4 {
		fail("the cgroup counted %.3f CPU-seconds for a 2 s busy loop", cg)
	}
	var row warden.UsageRow
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		row = report(bySandbox)
		if within(row.CPUSeconds, cg, 0.05) || time.Now().After(deadline) {
			break
		}
	}
	if !within(row.CPUSeconds, cg, 0.05) {
		fail("usage reports %.3f CPU-seconds, the cgroup %.3f (more than 5%% apart)", row.CPUSeconds, cg)
	}
	t.Logf("paused: usage %.3f CPU-s, cgroup %.3f CPU-s, %.3f GiB-s, %.1f s running", row.CPUSeconds, cg, row.MemoryGiBSeconds, row.RunningSeconds)

	time.Sleep(2 * time.Second)
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		fail("resume: %v", err)
	}
	paused := time.Since(pausedAt).Seconds()
	cg = float64(cgroupCPUNanos(t, sb.ID)) / 1e9
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		fail("kill: %v", err)
	}
	lifetime := time.Since(sb.CreatedAt).Seconds()
	// After its end: the final reading was taken before its cgroup went.
	row = report(bySandbox)
	if !within(row.CPUSeconds, cg, 0.05) {
		fail("after the end usage reports %.3f CPU-seconds, the cgroup had %.3f before the kill", row.CPUSeconds, cg)
	}
	if row.PausedSeconds < 1.9 || row.PausedSeconds > paused+0.5 {
		fail("paused seconds %.3f, the sandbox was paused for %.3f s", row.PausedSeconds, paused)
	}
	if row.RunningSeconds <= 0 || row.RunningSeconds+row.PausedSeconds > lifetime+1 {
		fail("running %.3f s + paused %.3f s, but the sandbox lived %.3f s", row.RunningSeconds, row.PausedSeconds, lifetime)
	}
	// 128 MiB held for the whole pause at least, and never more than the
	// 512 MiB limit for the whole life.
	if minGiBs := 0.125 * 0.9 * row.PausedSeconds; row.MemoryGiBSeconds < minGiBs || row.MemoryGiBSeconds > 0.5*lifetime {
		fail("memory %.3f GiB-s: want at least %.3f (128 MiB while paused) and at most %.3f (512 MiB for %.1f s)",
			row.MemoryGiBSeconds, minGiBs, 0.5*lifetime, lifetime)
	}
	if row.DiskBytes > 0 && row.DiskBytes < 100<<20 {
		fail("disk %d bytes with a 128 MiB file in it", row.DiskBytes)
	}
	// Egress: the datagrams' payload (some may be dropped on the way, never
	// more counted than sent).
	if row.EgressBytesOut < udpBytes/2 || row.EgressBytesOut > udpBytes {
		fail("egress out %d bytes, %d sent", row.EgressBytesOut, udpBytes)
	}
	if row.Sandboxes != 1 {
		fail("row covers %d sandboxes", row.Sandboxes)
	}
	t.Logf("ended: %+v", row)

	// Grouped by principal: the admin's row holds at least this sandbox.
	p := report(warden.UsageQuery{GroupBy: "principal", Since: "1h"})
	if p.CPUSeconds < row.CPUSeconds*0.999 {
		fail("principal row %+v has less than the sandbox's %.3f CPU-s", p, row.CPUSeconds)
	}
	// The CLI, as JSON and as CSV.
	stdout, stderr, code := d.cli(t, "", "usage", "--by", "sandbox", "--sandbox", sb.ID, "--since", "1h", "--json")
	var rep warden.UsageReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Rows) != 1 || rep.Rows[0].CPUSeconds != row.CPUSeconds {
		fail("warden usage --json: %d %q %q", code, stdout, stderr)
	}
	stdout, stderr, code = d.cli(t, "", "usage", "--by", "sandbox", "--sandbox", sb.ID, "--csv")
	recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if code != 0 || err != nil || len(recs) != 2 || recs[0][7] != "cpu_seconds" || recs[1][0] != sb.ID ||
		recs[1][7] != strconv.FormatFloat(row.CPUSeconds, 'f', 6, 64) {
		fail("warden usage --csv: %d %v %q %q", code, err, stdout, stderr)
	}
	// /metrics: the owner's series (the sandbox label summed away, as for
	// every per-sandbox series by default).
	cpu, ok := sum(scrapeMetrics(t, d), "warden_usage_cpu_seconds_total")
	if !ok || cpu < row.CPUSeconds*0.999 {
		fail("warden_usage_cpu_seconds_total %v (found %v), want at least %.3f", cpu, ok, row.CPUSeconds)
	}
}
