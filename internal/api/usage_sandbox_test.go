package api

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// TestSandboxUsageAPI: GET /v1/usage sums the usage meter's hourly rows by
// sandbox, principal, agent and day over a range (since/until or from/to),
// as JSON (checked against the spec) and CSV.
func TestSandboxUsageAPI(t *testing.T) {
	us, ok := env.srv.cfg.Store.(store.SandboxUsageStore)
	if !ok {
		t.Fatal("the test store keeps no sandbox usage")
	}
	c := mcpConformance(t, nil)
	admin := env.adminKey
	pa, pb := "pr-usage-a-"+uniq(), "pr-usage-b-"+uniq()
	sa, sb := "sb-usage-a-"+uniq(), "sb-usage-b-"+uniq()
	now := time.Now().UTC()
	h := now.Truncate(time.Hour)
	old := h.Add(-72 * time.Hour)
	rows := []store.SandboxUsage{
		{SandboxID: sa, Hour: h.Add(-time.Hour), PrincipalID: pa, Template: "base", CPUNanos: 1500e6, MemoryByteSeconds: 2 << 30,
			EgressBytesOut: 10, EgressBytesIn: 20, RunningMillis: 3000, PausedMillis: 1000, DiskBytes: 100},
		{SandboxID: sa, Hour: h, PrincipalID: pa, Template: "base", CPUNanos: 500e6, MemoryByteSeconds: 1 << 30,
			RunningMillis: 1000, DiskBytes: 300},
		{SandboxID: sb, Hour: h, PrincipalID: pb, Agent: "coder-" + pb, Template: "base", CPUNanos: 250e6, PausedMillis: 5000, DiskBytes: 7},
		{SandboxID: sb, Hour: old, PrincipalID: pb, Agent: "coder-" + pb, Template: "base", CPUNanos: 9e9},
	}
	if err := us.RecordSandboxUsage(t.Context(), rows, nil, nil); err != nil {
		t.Fatal(err)
	}
	type report struct {
		GroupBy string     `json:"group_by"`
		From    time.Time  `json:"from"`
		To      time.Time  `json:"to"`
		Rows    []usageRow `json:"rows"`
	}
	find := func(r report, key string) usageRow {
		t.Helper()
		for _, row := range r.Rows {
			if row.Key == key {
				return row
			}
		}
		t.Fatalf("no row %q in %+v", key, r.Rows)
		return usageRow{}
	}
	r := mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=sandbox&since=24h", admin, nil))
	a := find(r, sa)
	if a.CPUSeconds != 2 || a.MemoryGiBSeconds != 3 || a.EgressBytesOut != 10 || a.EgressBytesIn != 20 || a.RunningSeconds != 4 ||
		a.PausedSeconds != 1 || a.DiskBytes != 300 || a.Sandboxes != 1 || a.Calls != 0 {
		t.Fatalf("sandbox row %+v", a)
	}
	if b := find(r, sb); b.CPUSeconds != 0.25 || b.PausedSeconds != 5 {
		t.Fatalf("sandbox row %+v (the row of 3 days ago is out of range)", b)
	}
	// By agent and principal, with a filter; the old row in a range that
	// holds it (from/to are since/until by other names).
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=agent&agent=coder-"+pb+"&from=7d", admin, nil))
	if len(r.Rows) != 1 || r.Rows[0].Key != "coder-"+pb || r.Rows[0].CPUSeconds != 9.25 {
		t.Fatalf("agent rows %+v", r.Rows)
	}
	until := old.Add(time.Hour).Format(time.RFC3339)
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=principal&principal="+pb+"&from=7d&to="+until, admin, nil))
	if len(r.Rows) != 1 || r.Rows[0].CPUSeconds != 9 || !r.To.Equal(old.Add(time.Hour)) {
		t.Fatalf("principal rows to %s: %+v", until, r)
	}
	r = mcpDecode[report](t, c.want(200, "GET", "/v1/usage?group_by=day&sandbox="+sa+"&since=24h", admin, nil))
	var cpu float64
	for _, row := range r.Rows {
		cpu += row.CPUSeconds
	}
	if cpu != 2 {
		t.Fatalf("day rows of %s: %+v", sa, r.Rows)
	}
	// CSV: the LLM columns, then the sandbox ones.
	code, body := c.do("GET", "/v1/usage?group_by=sandbox&format=csv&sandbox="+sa+"&since=24h", admin, nil)
	recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if code != 200 || err != nil || len(recs) != 2 || recs[0][7] != "cpu_seconds" || recs[1][0] != sa || recs[1][7] != "2.000000" ||
		recs[0][13] != "disk_bytes" || recs[1][13] != "300" {
		t.Fatalf("csv %d %v %q", code, err, body)
	}
	c.want(400, "GET", "/v1/usage?since=1h&from=2h", admin, nil)
	c.want(400, "GET", "/v1/usage?group_by=bogus", admin, nil)
}
