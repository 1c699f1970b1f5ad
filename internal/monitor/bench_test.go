package monitor

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// BenchmarkRecord stores batches of 100 reported events (the store part of
// POST /v1/monitor/events): go test ./internal/monitor -bench Record.
func BenchmarkRecord(b *testing.B) {
	st, err := sqliteOpen(b)
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	detail, _ := json.Marshal(map[string]any{"tool_name": "Bash", "command": "make test", "cwd": "/home/dev/shop-api"})
	b.ResetTimer()
	for range b.N {
		evs := make([]store.MonitorEvent, 100)
		for i := range evs {
			evs[i] = store.MonitorEvent{Kind: "agent.tool", Source: SourceIngest, Principal: "pr-bench", Agent: "pr-bench",
				Session: "bench", Target: fmt.Sprintf("Bash: make test-%d", i), Outcome: "success", Detail: detail,
				Content: `{"command":"make test","description":"Run the tests"}`}
		}
		if _, err := m.Record(b.Context(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
