package e2b

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// cpuSample is the last CPU reading of a sandbox, for cpuUsedPct.
type cpuSample struct {
	at    time.Time
	nanos int64
}

// cpuSamples remembers one reading per sandbox.
type cpuSamples struct {
	mu sync.Mutex
	m  map[string]cpuSample
}

// pct returns the CPU use of sandbox id in percent of its cores: over the
// time since the previous reading when it is recent (at most a minute old),
// else averaged since the sandbox started.
func (c *cpuSamples) pct(sb store.Sandbox, nanos int64, cores float64, now time.Time) float64 {
	c.mu.Lock()
	prev, ok := c.m[sb.ID]
	if c.m == nil {
		c.m = map[string]cpuSample{}
	}
	if len(c.m) > 10000 {
		clear(c.m)
	}
	c.m[sb.ID] = cpuSample{at: now, nanos: nanos}
	c.mu.Unlock()
	var used, wall float64
	if ok && now.Sub(prev.at) > 10*time.Millisecond && now.Sub(prev.at) < time.Minute && nanos >= prev.nanos {
		used, wall = float64(nanos-prev.nanos), float64(now.Sub(prev.at).Nanoseconds())
	} else if !sb.StartedAt.IsZero() && now.After(sb.StartedAt) {
		used, wall = float64(nanos), float64(now.Sub(sb.StartedAt).Nanoseconds())
	}
	if wall <= 0 || cores <= 0 {
		return 0
	}
	p := used / wall / cores * 100
	if p > 100 {
		p = 100
	}
	return float64(int(p*100)) / 100
}

// sample is one usage reading of a running sandbox.
type sample struct {
	at                  time.Time
	cores               int64
	cpuPct              float64
	memUsed, memTotal   int64
	diskUsed, diskTotal int64
}

func (s *Server) sample(ctx context.Context, sb store.Sandbox) (sample, error) {
	u, err := s.cfg.Manager.Usage(ctx, sb.ID)
	if err != nil {
		return sample{}, err
	}
	now := time.Now().UTC()
	cores := toDetail(sb).CPUCount
	return sample{
		at: now, cores: cores, cpuPct: s.cpu.pct(sb, u.CPUNanos, float64(sb.CPUMillis)/1000, now),
		memUsed: u.MemoryBytes, memTotal: sb.MemoryMB << 20, diskUsed: u.DiskBytes, diskTotal: sb.DiskMB << 20,
	}, nil
}

// envdMetrics answers envd's GET /metrics from the daemon's own reading of
// the sandbox's cgroup (the sandbox itself sees no cgroup).
func (s *Server) envdMetrics(w http.ResponseWriter, r *http.Request, sb store.Sandbox) {
	m, err := s.sample(r.Context(), sb)
	if err != nil {
		notFound502(w, sb.ID)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ts": m.at.Unix(), "cpu_count": m.cores, "cpu_used_pct": m.cpuPct,
		"mem_total": m.memTotal, "mem_used": m.memUsed, "mem_cache": 0,
		"mem_total_mib": m.memTotal >> 20, "mem_used_mib": m.memUsed >> 20,
		"disk_used": m.diskUsed, "disk_total": m.diskTotal,
	})
}

// metrics answers GET /sandboxes/{id}/metrics: the samples of the sandbox's
// usage taken in the window [start, end] (unix seconds; start defaults to
// the sandbox's start, end to now, and an end in the future means now).
// Warden keeps no history: the one sample there is, taken now, is in the
// list when now is inside the window, so a window that ended earlier (one
// before the sandbox existed, say) is empty. start after end is a 400, as
// on E2B.
func (s *Server) metrics(w http.ResponseWriter, c *call) error {
	id := c.r.PathValue("id")
	sb, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	start, hasStart, err := unixParam(c.r, "start")
	if err != nil {
		return err
	}
	end, hasEnd, err := unixParam(c.r, "end")
	if err != nil {
		return err
	}
	if hasStart && hasEnd && start > end {
		return errf(http.StatusBadRequest, "start (%d) is after end (%d)", start, end)
	}
	out := []map[string]any{}
	m, err := s.sample(c.r.Context(), sb)
	if err == nil && inWindow(m.at.Unix(), sb.StartedAt, start, hasStart, end, hasEnd) {
		out = append(out, map[string]any{
			"timestamp": m.at.Format(time.RFC3339), "timestampUnix": m.at.Unix(), "cpuCount": m.cores,
			"cpuUsedPct": m.cpuPct, "memUsed": m.memUsed, "memTotal": m.memTotal, "memCache": 0,
			"diskUsed": m.diskUsed, "diskTotal": m.diskTotal,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// inWindow reports whether a sample taken at unix second at lies in the
// window [start, end]; a missing start is the sandbox's start (started, to
// the second), a missing end is at itself.
func inWindow(at int64, started time.Time, start int64, hasStart bool, end int64, hasEnd bool) bool {
	if !hasStart && !started.IsZero() {
		start, hasStart = started.Unix(), true
	}
	if hasStart && at < start {
		return false
	}
	return !hasEnd || at <= end
}

// unixParam reads an optional query parameter of unix seconds.
func unixParam(r *http.Request, name string) (int64, bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, errf(http.StatusBadRequest, "%s must be a unix time in seconds, not %q", name, v)
	}
	return n, true, nil
}
