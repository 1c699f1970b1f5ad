package integration

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// BenchmarkSnapshot measures, against a real daemon on the native backend,
// a snapshot of a sandbox whose writable layer holds WARDEN_BENCH_SNAPSHOT_MB
// MiB (default 1024) of changed files (256 KiB each, random bytes), and a
// create from it to the first output of a command; and, in the same run, a
// plain `cp -a` of the same files (the sandbox's upper directory) to the
// same file system as the snapshot's. Each iteration does all three.
// docs/benchmarks.md has the command and a run.
//
//	sudo CGO_ENABLED=0 go test ./test/integration -run '^$' -bench BenchmarkSnapshot -benchtime 3x -timeout 30m
func BenchmarkSnapshot(b *testing.B) {
	mb := 1024
	if v := os.Getenv("WARDEN_BENCH_SNAPSHOT_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("WARDEN_BENCH_SNAPSHOT_MB=%q", v)
		}
		mb = n
	}
	url, adminKey, pid := benchDaemon(b)
	c, err := warden.New(warden.WithBaseURL(url), warden.WithAPIKey(adminKey))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	state, run := daemonDirs(b, pid)
	var made []string
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, id := range made {
			c.KillSandbox(cctx, id)
		}
	})
	src, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 3600, DiskMB: 2*mb + 512})
	if err != nil {
		b.Fatal(err)
	}
	made = append(made, src.ID)
	// mb/64 chunks of 64 MiB, each split into 256 KiB files.
	fill := fmt.Sprintf(`set -e; mkdir -p /home/user/data; cd /home/user/data
for i in $(seq 1 %d); do head -c 67108864 /dev/urandom | split -b 262144 -a 3 - "c$i-"; done
find . -type f | wc -l; du -sm . | cut -f1`, max(mb/64, 1))
	out, code := benchSh(b, c, src.ID, fill)
	if code != 0 {
		b.Fatalf("fill (exit %d): %s", code, out)
	}
	b.Logf("source %s: files, MiB: %s", src.ID, strings.Join(strings.Fields(out), ", "))
	// The native backend's run directory; nsinit's u0 is the "/" upper.
	upper := filepath.Join(run, "native", src.ID, "stage", "u0")
	if _, err := os.Stat(filepath.Join(upper, "home", "user", "data")); err != nil {
		b.Fatalf("the sandbox's upper directory: %v", err)
	}
	tmp := filepath.Join(state, "templates", "tmp")
	var snapT, createT, cpT, frozenT time.Duration
	freezer := freezerState(b, src.ID)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(tmp, fmt.Sprintf("bench-cp-%d", i))
		t0 := time.Now()
		if out, err := exec.Command("cp", "-a", upper, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp -a: %v: %s", err, out)
		}
		cpT += time.Since(t0)
		os.RemoveAll(dst)

		t0 = time.Now()
		stopPoll := pollFrozen(freezer)
		sn, err := c.CreateSnapshot(ctx, src.ID, fmt.Sprintf("bench-%d", i))
		frozenT += stopPoll()
		if err != nil {
			b.Fatal(err)
		}
		snapT += time.Since(t0)

		t0 = time.Now()
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Snapshot: sn.Name, TimeoutSeconds: 600, DiskMB: 2*mb + 512})
		if err != nil {
			b.Fatal(err)
		}
		made = append(made, sb.ID)
		if out, code := benchSh(b, c, sb.ID, "ls /home/user/data | wc -l"); code != 0 || strings.TrimSpace(out) == "0" {
			b.Fatalf("sandbox from the snapshot (exit %d): %s", code, out)
		}
		createT += time.Since(t0)
		b.StopTimer()
		c.KillSandbox(ctx, sb.ID)
		if err := c.DeleteSnapshot(ctx, sn.Name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(snapT.Seconds()/n, "snapshot-s")
	b.ReportMetric(frozenT.Seconds()/n, "frozen-s")
	b.ReportMetric(createT.Seconds()/n, "create-from-s")
	b.ReportMetric(cpT.Seconds()/n, "cp-a-s")
	b.ReportMetric(snapT.Seconds()/cpT.Seconds(), "snapshot/cp-a")
	b.ReportMetric(float64(mb)/(snapT.Seconds()/n), "snapshot-MiB/s")
}

// daemonDirs reads a running wardend's --state-dir and --run-dir.
func daemonDirs(b *testing.B, pid int) (state, run string) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		b.Fatal(err)
	}
	args := strings.Split(string(raw), "\x00")
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--state-dir":
			state = args[i+1]
		case "--run-dir":
			run = args[i+1]
		}
	}
	if state == "" || run == "" {
		b.Fatalf("wardend's arguments: %q", args)
	}
	return state, run
}

func benchSh(b *testing.B, c *warden.Client, id, line string) (string, int) {
	var out strings.Builder
	res, err := c.Exec(context.Background(), id, warden.ExecRequest{Command: line, TimeoutSeconds: 1200}, warden.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil {
		b.Fatalf("exec in %s: %v", id, err)
	}
	return out.String(), res.ExitCode
}

// freezerState finds the freezer.state file of sandbox id's cgroup (cgroup
// v1's freezer hierarchy, else cgroup.freeze's v2 cgroup.events).
func freezerState(b *testing.B, id string) string {
	var found string
	for _, root := range []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup"} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || found != "" {
				return filepath.SkipDir
			}
			if d.IsDir() && strings.Contains(d.Name(), id) {
				for _, f := range []string{"freezer.state", "cgroup.events"} {
					if _, err := os.Stat(filepath.Join(p, f)); err == nil {
						found = filepath.Join(p, f)
						return filepath.SkipAll
					}
				}
			}
			return nil
		})
		if found != "" {
			return found
		}
	}
	b.Fatalf("no freezer state file for sandbox %s", id)
	return ""
}

// pollFrozen samples a freezer state file every millisecond until the
// function it returns is called, which returns how long it read frozen.
func pollFrozen(file string) func() time.Duration {
	stop := make(chan struct{})
	res := make(chan time.Duration, 1)
	go func() {
		var frozen time.Duration
		last := time.Now()
		for {
			select {
			case <-stop:
				res <- frozen
				return
			case <-time.After(time.Millisecond):
			}
			b, _ := os.ReadFile(file)
			now := time.Now()
			s := string(b)
			if strings.Contains(s, "FROZEN") || strings.Contains(s, "FREEZING") || strings.Contains(s, "frozen 1") {
				frozen += now.Sub(last)
			}
			last = now
		}
	}()
	return func() time.Duration { close(stop); return <-res }
}
