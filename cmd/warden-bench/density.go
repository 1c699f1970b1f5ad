package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/benchstat"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// densityStep is what the sweep measured with n idle sandboxes held.
type densityStep struct {
	N            int     `json:"n"`
	HostMiBPer   float64 `json:"host_mib_per_sandbox"`   // MemTotal-MemAvailable growth / n
	CgroupMiBPer float64 `json:"cgroup_mib_per_sandbox"` // mean of the sandboxes' cgroup memory
	DaemonMiB    float64 `json:"daemon_rss_growth_mib"`  // wardend's RSS growth
	CreateP50MS  float64 `json:"create_p50_ms"`          // creates of this step
	CreateP99MS  float64 `json:"create_p99_ms"`
	ExecP50MS    float64 `json:"exec_p50_ms"` // a command in the newest sandbox
}

// density starts idle sandboxes in steps up to the largest of steps, and
// after each step reports host memory per sandbox (the daemon plus
// everything in the sandboxes' cgroups, as the kernel accounts it) and how
// create latency grows with n. It kills them all at the end.
func density(ctx context.Context, c *warden.Client, steps []int) ([]densityStep, []*benchstat.Series, error) {
	base, err := usedMemory()
	if err != nil {
		return nil, nil, err
	}
	daemonPID := findProcess("wardend")
	baseRSS := rssMiB(daemonPID)
	var ids []string
	defer func() {
		// Kill in parallel: a thousand one by one takes a while.
		var wg sync.WaitGroup
		ch := make(chan string)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ch {
					c.KillSandbox(context.WithoutCancel(ctx), id)
				}
			}()
		}
		for _, id := range ids {
			ch <- id
		}
		close(ch)
		wg.Wait()
	}()
	var out []densityStep
	var series []*benchstat.Series
	for _, n := range steps {
		s := &benchstat.Series{Name: fmt.Sprintf("api: create with %d..%d idle sandboxes held", len(ids), n)}
		for len(ids) < n {
			t0 := time.Now()
			sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 3600})
			if err != nil {
				return out, series, fmt.Errorf("density: create sandbox %d: %w", len(ids)+1, err)
			}
			s.Add(time.Since(t0))
			ids = append(ids, sb.ID)
		}
		time.Sleep(time.Second) // let the pool refill and memory settle
		used, err := usedMemory()
		if err != nil {
			return out, series, err
		}
		var cg int64
		for _, id := range ids {
			u, err := c.Usage(ctx, id)
			if err != nil {
				return out, series, fmt.Errorf("density: usage of %s: %w", id, err)
			}
			cg += u.MemoryBytes
		}
		ex := &benchstat.Series{}
		for i := 0; i < 20; i++ {
			t0 := time.Now()
			var o bytes.Buffer
			if _, err := c.Exec(ctx, ids[len(ids)-1], warden.ExecRequest{Cmd: []string{"echo", "hi"}}, warden.ExecIO{Stdout: &o}); err != nil {
				return out, series, err
			}
			ex.Add(time.Since(t0))
		}
		st := densityStep{
			N:            n,
			HostMiBPer:   float64(used-base) / float64(n) / (1 << 20),
			CgroupMiBPer: float64(cg) / float64(n) / (1 << 20),
			DaemonMiB:    rssMiB(daemonPID) - baseRSS,
			CreateP50MS:  ms(s.Quantile(0.5)),
			CreateP99MS:  ms(s.Quantile(0.99)),
			ExecP50MS:    ms(ex.Quantile(0.5)),
		}
		out = append(out, st)
		series = append(series, s)
	}
	return out, series, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// usedMemory is MemTotal - MemAvailable from /proc/meminfo, in bytes.
func usedMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total, avail int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	if total == 0 || avail == 0 {
		return 0, fmt.Errorf("density: /proc/meminfo lacks MemTotal or MemAvailable")
	}
	return total - avail, nil
}

// findProcess returns the pid of the first process called name, or 0.
func findProcess(name string) int {
	ents, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range ents {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == name {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// rssMiB is a process's resident set in MiB (0 when unknown).
func rssMiB(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// printDensity prints the sweep as a table.
func printDensity(steps []densityStep) {
	fmt.Println("\ndensity (idle sandboxes held at once; memory as the host accounts it):")
	fmt.Println("| sandboxes | host MiB / sandbox | cgroup MiB / sandbox | wardend RSS growth MiB | create p50 ms | create p99 ms | exec p50 ms |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range steps {
		fmt.Printf("| %d | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f |\n", s.N, s.HostMiBPer, s.CgroupMiBPer, s.DaemonMiB, s.CreateP50MS, s.CreateP99MS, s.ExecP50MS)
	}
}
