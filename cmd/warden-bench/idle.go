package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/isolation/cgroup"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// idleSettle is how long the idle sandboxes rest before the window (their
// agents' start-up work, the pool's refill); idleWindow is the window.
const (
	idleSettle = 2 * time.Second
	idleWindow = 10 * time.Second
)

// idleCPU is what the idle-CPU measurement found: the CPU time n idle
// native sandboxes (everything in their cgroups) and wardend used over one
// window of wall time.
type idleCPU struct {
	N             int     `json:"n"`
	WindowSeconds float64 `json:"window_s"`
	// SandboxesMS is the sandboxes' CPU time together, from their cgroups
	// (cpuacct.usage on cgroup v1, cpu.stat usage_usec on v2).
	SandboxesMS float64 `json:"sandboxes_cpu_ms"`
	// PerSandboxMSPerS is SandboxesMS / N / window.
	PerSandboxMSPerS float64 `json:"per_sandbox_cpu_ms_per_s"`
	// WardendMS is wardend's CPU time (utime + stime of /proc/<pid>/stat,
	// clock ticks: 10 ms resolution); -1 when wardend was not found.
	WardendMS  float64 `json:"wardend_cpu_ms"`
	WardendPID int     `json:"wardend_pid,omitempty"`
}

// String is the measurement as one line for the notes.
func (r idleCPU) String() string {
	s := fmt.Sprintf("idle CPU: %d idle native sandboxes used %.1f ms of CPU in %.0f s together (their cgroups), %.3f ms per sandbox per second",
		r.N, r.SandboxesMS, r.WindowSeconds, r.PerSandboxMSPerS)
	if r.WardendMS >= 0 {
		s += fmt.Sprintf("; wardend (pid %d) used %.0f ms (10 ms resolution)", r.WardendPID, r.WardendMS)
	} else {
		s += "; wardend not measured (its pid was not found: pass -wardend-pid)"
	}
	return s
}

// idleBench creates n idle native sandboxes through the API, lets them
// settle, and measures the CPU time their cgroups and wardend use over a
// window in which nothing is asked of them; it kills them after. It reads
// the cgroups directly (warden-bench runs as root on wardend's host), so
// the measurement sends wardend no request during the window. wardendPID 0
// finds wardend as the process listening on apiURL's port.
func idleBench(ctx context.Context, c *warden.Client, n int, apiURL string, wardendPID int) (idleCPU, error) {
	res := idleCPU{N: n, WardendMS: -1}
	var ids []string
	defer func() { killAll(ctx, c, ids) }()
	for len(ids) < n {
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: "native", TimeoutSeconds: 3600})
		if err != nil {
			return res, fmt.Errorf("idle: create sandbox %d: %w", len(ids)+1, err)
		}
		ids = append(ids, sb.ID)
	}
	groups := make([]*cgroup.Group, 0, n)
	for _, id := range ids {
		g, err := sandboxCgroup(id)
		if err != nil {
			return res, err
		}
		groups = append(groups, g)
	}
	if wardendPID == 0 {
		wardendPID = listenerPID(apiURL)
	}
	time.Sleep(idleSettle)

	cpu := func() (int64, error) {
		var sum int64
		for _, g := range groups {
			st, err := g.Stats()
			if err != nil {
				return 0, fmt.Errorf("idle: %w", err)
			}
			sum += int64(st.CPUNanos)
		}
		return sum, nil
	}
	d0, derr := processCPU(wardendPID)
	s0, err := cpu()
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(idleWindow)
	s1, err := cpu()
	if err != nil {
		return res, err
	}
	window := time.Since(t0)
	d1, derr1 := processCPU(wardendPID)
	res.WindowSeconds = window.Seconds()
	res.SandboxesMS = float64(s1-s0) / 1e6
	res.PerSandboxMSPerS = res.SandboxesMS / float64(n) / window.Seconds()
	if derr == nil && derr1 == nil {
		res.WardendMS = float64(d1-d0) / 1e6
		res.WardendPID = wardendPID
	}
	return res, nil
}

// killAll kills sandboxes ids, eight at a time.
func killAll(ctx context.Context, c *warden.Client, ids []string) {
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
}

// sandboxCgroup loads the cgroup of native sandbox id (an API id). The
// native backend names a sandbox's cgroup "sb-" + its backend id; the
// backend id is the API id, or "pool-" + the id's suffix for a sandbox
// claimed from the warm pool (internal/sandbox: prestart).
func sandboxCgroup(id string) (*cgroup.Group, error) {
	for _, name := range []string{"sb-pool-" + strings.TrimPrefix(id, "sb-"), "sb-" + id} {
		g, err := cgroup.Load(name)
		if err == nil {
			return g, nil
		}
		if !errors.Is(err, cgroup.ErrNotExist) {
			return nil, fmt.Errorf("idle: cgroup of %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("idle: no cgroup for sandbox %s on this host (is wardend here, on the native backend?)", id)
}

// processCPU is the CPU time of process pid (utime + stime from
// /proc/<pid>/stat, counting its exited threads), in nanoseconds.
func processCPU(pid int) (int64, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("malformed /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat")
	}
	// USER_HZ is 100 on every Linux architecture Go supports.
	return (ut + st) * int64(10*time.Millisecond), nil
}

// listenerPID returns the pid of the process with a TCP socket listening
// on rawURL's port (on this host, in this network namespace), or 0.
func listenerPID(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, ino := range listeningInodes(f, uint16(p)) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

// listeningInodes returns the socket inodes in a /proc/net/tcp{,6} table
// that listen on port.
func listeningInodes(table string, port uint16) []string {
	f, err := os.Open(table)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fs) < 10 || fs[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(hexPort, 16, 16); err == nil && uint16(v) == port {
			out = append(out, fs[9])
		}
	}
	return out
}
