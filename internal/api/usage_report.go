package api

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/store"
)

// usageRow is one group of GET /v1/usage: the LLM gateway's calls, tokens
// and cost, and the sandboxes' resources (the usage meter's hourly rows,
// internal/usage; docs/usage.md).
type usageRow struct {
	Key        string  `json:"key"`
	Calls      int64   `json:"llm_calls"`
	TokensIn   int64   `json:"llm_tokens_in"`
	TokensOut  int64   `json:"llm_tokens_out"`
	CostMicros int64   `json:"llm_cost_micros"`
	CostUSD    float64 `json:"llm_cost_usd"`

	Sandboxes        int64   `json:"sandboxes"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	EgressBytesOut   int64   `json:"egress_bytes_out"`
	EgressBytesIn    int64   `json:"egress_bytes_in"`
	RunningSeconds   float64 `json:"running_seconds"`
	PausedSeconds    float64 `json:"paused_seconds"`
	DiskBytes        int64   `json:"disk_bytes"`
	// Volumes and VolumeBytes: the principal's volumes and the bytes their
	// filesystems use now (group_by=principal only; usage_volumes.go).
	Volumes     int64 `json:"volumes"`
	VolumeBytes int64 `json:"volume_bytes"`

	cpuNanos, memByteSeconds, runMillis, pausedMillis int64
	sandboxes                                         map[string]int64 // id -> most disk seen
}

// usageGroups are the group_by values and, for each, the key of an LLM
// row and of a sandbox row ("" for a grouping the rows do not have).
var usageGroups = map[string]struct {
	llm     func(store.LLMUsage) string
	sandbox func(store.SandboxUsage) string
}{
	"principal": {func(u store.LLMUsage) string { return u.PrincipalID }, func(u store.SandboxUsage) string { return u.PrincipalID }},
	"agent":     {func(u store.LLMUsage) string { return u.Agent }, func(u store.SandboxUsage) string { return u.Agent }},
	"sandbox":   {func(u store.LLMUsage) string { return u.SandboxID }, func(u store.SandboxUsage) string { return u.SandboxID }},
	"model":     {func(u store.LLMUsage) string { return u.Provider + "/" + u.Model }, nil},
	"day":       {func(u store.LLMUsage) string { return u.Day }, func(u store.SandboxUsage) string { return u.Hour.Format(time.DateOnly) }},
}

// llmUsageRows are the LLM rows the filter matches: from the store when it
// keeps them, else from the gateway.
func (s *Server) llmUsageRows(r *http.Request, f store.LLMUsageFilter) ([]store.LLMUsage, bool, error) {
	if us, ok := s.cfg.Store.(store.UsageStore); ok {
		rows, err := us.ListLLMUsage(r.Context(), f)
		return rows, true, err
	}
	if s.cfg.LLM != nil {
		rows, err := s.cfg.LLM.ListUsage(r.Context(), f)
		return rows, true, err
	}
	return nil, false, nil
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	groupBy := cmp.Or(q.Get("group_by"), "principal")
	g, ok := usageGroups[groupBy]
	if !ok {
		return apierr.BadRequest("query parameter group_by: want principal, agent, sandbox, model or day")
	}
	format := cmp.Or(q.Get("format"), "json")
	if format != "json" && format != "csv" {
		return apierr.BadRequest("query parameter format: want json or csv")
	}
	// from and to are since and until by other names.
	for _, p := range [][2]string{{"from", "since"}, {"to", "until"}} {
		if v := q.Get(p[0]); v != "" {
			if q.Get(p[1]) != "" {
				return apierr.BadRequest("query parameters %s and %s are the same: give one", p[0], p[1])
			}
			q.Set(p[1], v)
		}
	}
	r.URL.RawQuery = q.Encode()
	now := s.now().UTC()
	since, err := usageTime(r, "since", now, now.AddDate(0, 0, -30))
	if err != nil {
		return err
	}
	until, err := usageTime(r, "until", now, now)
	if err != nil {
		return err
	}
	if until.Before(since) {
		return apierr.BadRequest("until is before since")
	}
	principal, agent, sandboxID := q.Get("principal"), q.Get("agent"), q.Get("sandbox")
	f := store.LLMUsageFilter{FromDay: since.UTC().Format(time.DateOnly), ToDay: until.UTC().Format(time.DateOnly), Agent: agent,
		Sandbox: sandboxID}
	if principal != "" {
		f.Principals = []string{principal}
	}
	byKey := map[string]*usageRow{}
	row := func(k string) *usageRow {
		if byKey[k] == nil {
			byKey[k] = &usageRow{Key: k}
		}
		return byKey[k]
	}
	var llmRows []store.LLMUsage
	haveLLM := false
	if g.llm != nil { // calls from a sandbox carry its id; others have none ("")
		if llmRows, haveLLM, err = s.llmUsageRows(r, f); err != nil {
			return err
		}
	}
	sus, haveSandbox := s.cfg.Store.(store.SandboxUsageStore)
	if !haveLLM && !haveSandbox {
		return apierr.Unavailable("no usage is recorded on this daemon", nil)
	}
	for _, u := range llmRows {
		g := row(g.llm(u))
		g.Calls += u.Calls
		g.TokensIn += u.TokensIn
		g.TokensOut += u.TokensOut
		g.CostMicros += u.CostMicros
	}
	if haveSandbox && g.sandbox != nil {
		sf := store.SandboxUsageFilter{Sandbox: sandboxID, Agent: agent, From: since, To: until}
		if principal != "" {
			sf.Principals = []string{principal}
		}
		srows, err := sus.ListSandboxUsage(r.Context(), sf)
		if err != nil {
			return err
		}
		for _, u := range srows {
			g := row(g.sandbox(u))
			g.cpuNanos += u.CPUNanos
			g.memByteSeconds += u.MemoryByteSeconds
			g.EgressBytesOut += u.EgressBytesOut
			g.EgressBytesIn += u.EgressBytesIn
			g.runMillis += u.RunningMillis
			g.pausedMillis += u.PausedMillis
			if g.sandboxes == nil {
				g.sandboxes = map[string]int64{}
			}
			g.sandboxes[u.SandboxID] = max(g.sandboxes[u.SandboxID], u.DiskBytes)
		}
	}
	if groupBy == "principal" && agent == "" && sandboxID == "" {
		if err := s.addVolumeUsage(r.Context(), principal, row); err != nil { // usage_volumes.go
			return err
		}
	}
	out := make([]usageRow, 0, len(byKey))
	for _, g := range byKey {
		g.CostUSD = float64(g.CostMicros) / 1e6
		g.CPUSeconds = float64(g.cpuNanos) / 1e9
		g.MemoryGiBSeconds = float64(g.memByteSeconds) / (1 << 30)
		g.RunningSeconds = float64(g.runMillis) / 1e3
		g.PausedSeconds = float64(g.pausedMillis) / 1e3
		g.Sandboxes = int64(len(g.sandboxes))
		for _, d := range g.sandboxes {
			g.DiskBytes += d
		}
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b usageRow) int { return cmp.Compare(a.Key, b.Key) })
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{groupBy, "llm_calls", "llm_tokens_in", "llm_tokens_out", "llm_cost_micros", "llm_cost_usd",
			"sandboxes", "cpu_seconds", "memory_gib_seconds", "egress_bytes_out", "egress_bytes_in", "running_seconds",
			"paused_seconds", "disk_bytes", "volumes", "volume_bytes"})
		ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }
		for _, g := range out {
			_ = cw.Write([]string{csvSafe(g.Key), fmt.Sprint(g.Calls), fmt.Sprint(g.TokensIn), fmt.Sprint(g.TokensOut),
				fmt.Sprint(g.CostMicros), ff(g.CostUSD), fmt.Sprint(g.Sandboxes), ff(g.CPUSeconds), ff(g.MemoryGiBSeconds),
				fmt.Sprint(g.EgressBytesOut), fmt.Sprint(g.EgressBytesIn), ff(g.RunningSeconds), ff(g.PausedSeconds),
				fmt.Sprint(g.DiskBytes), fmt.Sprint(g.Volumes), fmt.Sprint(g.VolumeBytes)})
		}
		cw.Flush()
		return nil
	}
	return writeJSON(w, http.StatusOK, struct {
		GroupBy string     `json:"group_by"`
		FromDay string     `json:"from_day"`
		ToDay   string     `json:"to_day"`
		From    time.Time  `json:"from"`
		To      time.Time  `json:"to"`
		Rows    []usageRow `json:"rows"`
	}{groupBy, f.FromDay, f.ToDay, since.UTC(), until.UTC(), out})
}

// usageTime reads since/until: RFC 3339, a date (YYYY-MM-DD) or a
// duration back from now ("24h", "7d").
func usageTime(r *http.Request, name string, now time.Time, def time.Time) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= 36500 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, apierr.BadRequest("query parameter %s: want RFC 3339, YYYY-MM-DD or a duration such as 24h or 7d", name)
}
