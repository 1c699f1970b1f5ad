package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// TestMigration0020KeepsLLMUsage applies the migrations before 0020 to a
// database with LLM usage in it, then 0020: the rows are kept, as calls
// from no sandbox, and a sandbox's row for the same key is a new row.
func TestMigration0020KeepsLLMUsage(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "w.db")+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, m := range ms[:19] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
	}
	if _, err := db.Exec(`INSERT INTO llm_usage (principal_id, agent, day, provider, model, calls, tokens_in, tokens_out, cost_micros)
		VALUES ('alice', 'bot', '2026-12-01', 'openai', 'gpt', 3, 30, 6, 90)`); err != nil {
		t.Fatal(err)
	}
	if ms[19].version != 20 {
		t.Fatalf("migration 20 is %s", ms[19].name)
	}
	if _, err := db.Exec(ms[19].sql); err != nil {
		t.Fatalf("%s: %v", ms[19].name, err)
	}
	var sb string
	var calls, in, out, cost int64
	if err := db.QueryRow(`SELECT sandbox_id, calls, tokens_in, tokens_out, cost_micros FROM llm_usage WHERE principal_id = 'alice'`).
		Scan(&sb, &calls, &in, &out, &cost); err != nil || sb != "" || calls != 3 || in != 30 || out != 6 || cost != 90 {
		t.Fatalf("kept row: %q %d %d %d %d %v", sb, calls, in, out, cost, err)
	}
	if _, err := db.Exec(`INSERT INTO llm_usage (principal_id, agent, day, provider, model, sandbox_id, calls, tokens_in, tokens_out, cost_micros)
		VALUES ('alice', 'bot', '2026-12-01', 'openai', 'gpt', 'sb-1', 1, 1, 1, 1)`); err != nil {
		t.Fatalf("a sandbox's row beside it: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN ('llm_usage_day', 'llm_usage_sandbox')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("indexes: %d %v", n, err)
	}
}
