package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// BenchmarkMonitorIngest posts batches of 100 events to a real daemon's
// POST /v1/monitor/events from 4 concurrent clients (each batch stored
// before it is answered) and reports events/s and the median and p99
// latency of a batch. docs/benchmarks.md has the command and a run.
//
//	sudo CGO_ENABLED=0 go test ./test/integration -run '^$' -bench BenchmarkMonitorIngest -benchtime 400x
func BenchmarkMonitorIngest(b *testing.B) {
	const batch, clients = 100, 4
	url, adminKey, pid := benchDaemon(b)
	admin, err := warden.New(warden.WithBaseURL(url), warden.WithAPIKey(adminKey))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: "bench-agent"})
	if err != nil {
		b.Fatal(err)
	}
	k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "bench", Scopes: []string{warden.ScopeMonitorWrite}})
	if err != nil {
		b.Fatal(err)
	}
	c, err := warden.New(warden.WithBaseURL(url), warden.WithAPIKey(k.Key), warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		b.Fatal(err)
	}
	evs := make([]warden.ReportedEvent, batch)
	for i := range evs {
		evs[i] = warden.ReportedEvent{Kind: "agent.tool", Session: "bench", Target: fmt.Sprintf("Bash: make test-%d", i),
			Outcome: "success", Detail: map[string]any{"tool_name": "Bash", "command": "make test", "cwd": "/home/dev/shop-api"},
			Content: `{"command":"make test","description":"Run the tests"}`}
	}
	// Warm up the connections and the tables.
	if _, err := c.ReportMonitorEvents(ctx, evs); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	b.ResetTimer()
	cpu0 := cpuTime(b, pid)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				t0 := time.Now()
				_, err := c.ReportMonitorEvents(ctx, evs)
				el := time.Since(t0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, el)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(b, pid) - cpu0
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	rate := float64(b.N*batch) / elapsed.Seconds()
	p50, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms/batch")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms/batch")
	// The daemon's CPU time per event bounds what one idle core could
	// take, whatever else the machine runs.
	perEvent := cpu / time.Duration(b.N*batch)
	b.ReportMetric(float64(perEvent.Nanoseconds())/1000, "daemon-cpu-us/event")
	fmt.Printf("monitor ingest: %d batches of %d events from %d clients in %v: %.0f events/s, batch p50 %v, p99 %v; "+
		"daemon CPU %v (%v per event, %.0f events per CPU-second)\n",
		b.N, batch, clients, elapsed.Round(time.Millisecond), rate, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond),
		cpu, perEvent, float64(b.N*batch)/cpu.Seconds())
}

// benchDaemon starts wardend as startDaemon does (which takes a
// *testing.T) and returns its URL and admin key.
func benchDaemon(b *testing.B) (url, adminKey string, pid int) {
	b.Helper()
	base, err := os.MkdirTemp("", "warden-bench-")
	if err != nil {
		b.Fatal(err)
	}
	os.Chmod(base, 0o755)
	b.Cleanup(func() { os.RemoveAll(base) })
	state, run := filepath.Join(base, "state"), filepath.Join(base, "run")
	if err := os.MkdirAll(filepath.Join(state, "templates"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(sharedBase, filepath.Join(state, "templates", "base")); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// No per-principal rate limit: the benchmark measures the ingest path.
	conf := filepath.Join(base, "wardend.yaml")
	if err := os.WriteFile(conf, []byte("rate_limit: -1\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "wardend"), "--listen", addr, "--socket", filepath.Join(run, "wardend.sock"),
		"--state-dir", state, "--run-dir", run, "--agent", filepath.Join(binDir, "warden-agent"), "--pool-size", "0",
		"--socket-group", "", "--e2b-listen", "", "--config", conf)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if v := os.Getenv("WARDEN_SNAPSHOT_PRECOPY"); v != "" { // BenchmarkSnapshot's before and after
		cmd.Env = append(cmd.Env, "WARDEN_SNAPSHOT_PRECOPY="+v)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	url = "http://" + addr
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("wardend did not come up:\n%s", log.String())
		}
	}
	key, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		b.Fatal(err)
	}
	return url, strings.TrimSpace(string(key)), cmd.Process.Pid
}

// cpuTime is the CPU time (user and system) process pid has used.
func cpuTime(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which is in parentheses): utime and
	// stime are the 12th and 13th, in clock ticks (100 per second).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
