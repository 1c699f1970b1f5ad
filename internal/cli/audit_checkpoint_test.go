package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestAuditVerifyCheckpoint: 'warden audit verify --checkpoint' fetches
// the log from the daemon and checks it here against saved signed
// checkpoints; 'warden audit export' writes it as JSON lines.
func TestAuditVerifyCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, _ := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	seed, _ := audit.LoadOrCreateKey(filepath.Join(dir, "cp.key"))
	l, err := audit.New(ctx, audit.Config{Store: st, Key: key, CheckpointPath: filepath.Join(dir, "audit.checkpoint"), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	notes, pubFile := filepath.Join(dir, "notes.txt"), filepath.Join(dir, "cp.pub")
	pub, err := audit.NewPublisher(ctx, audit.PublisherConfig{Store: st, Checkpoints: st, Seed: seed, Origin: "warden-audit/test",
		File: notes, PublicKeyFile: pubFile})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.Append(ctx, audit.Event{PrincipalID: "pr-1", Action: "sandbox.create", Target: fmt.Sprint("sb-", i), Outcome: "success"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := pub.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}

	d := newFakeDaemon(t)
	d.handle("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		evs, err := st.ListAudit(r.Context(), store.AuditFilter{After: after, Limit: 2})
		if err != nil {
			t.Error(err)
		}
		page := warden.AuditPage{Events: []warden.AuditEvent{}, NextAfter: after}
		for _, e := range evs {
			var detail map[string]any
			_ = json.Unmarshal(e.Detail, &detail)
			page.Events = append(page.Events, warden.AuditEvent{Seq: e.Seq, Time: e.Time, PrincipalID: e.PrincipalID, Action: e.Action,
				Target: e.Target, Outcome: e.Outcome, Detail: detail, PrevHash: e.PrevHash, Hash: e.Hash})
			page.NextAfter = e.Seq
		}
		writeJSON(w, 200, page)
	})
	res := run(t, d, "audit", "verify", "--checkpoint", notes, "--key", pubFile)
	if res.code != 0 || res.stdout != "audit log ok: 5 events checked\n" {
		t.Fatalf("intact: %d %q %q", res.code, res.stdout, res.stderr)
	}
	if res := run(t, d, "audit", "verify", "--checkpoint", notes); res.code != ExitUsage {
		t.Fatalf("no key: %d %q", res.code, res.stderr)
	}

	// Export, both forms.
	out := filepath.Join(dir, "export.jsonl")
	if res := run(t, d, "audit", "export", "--format", "ocsf", "--output", out); res.code != 0 || !strings.Contains(res.stderr, "5 events written") {
		t.Fatalf("export: %d %q", res.code, res.stderr)
	}
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var ev map[string]any
	if len(lines) != 5 || json.Unmarshal([]byte(lines[4]), &ev) != nil || ev["class_uid"] != float64(6003) || ev["activity_name"] != "sandbox.create" {
		t.Fatalf("ocsf export: %q", b)
	}
	res = run(t, d, "audit", "export", "--after", "3")
	if n := strings.Count(res.stdout, "\n"); res.code != 0 || n != 2 || !strings.Contains(res.stdout, `"hash":"`) {
		t.Fatalf("jsonl export: %d %q", res.code, res.stdout)
	}

	// Truncated: the newest two events deleted.
	l.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	st = raw
	defer raw.Close()
	db := rawDB(t, filepath.Join(dir, "warden.db"))
	if _, err := db.Exec(`DELETE FROM audit_events WHERE seq > 3`); err != nil {
		t.Fatal(err)
	}
	res = run(t, d, "audit", "verify", "--checkpoint", notes, "--key", pubFile)
	if res.code != 1 || !strings.Contains(res.stdout, "seq 4: missing: events 4 to 5 (2 events) are missing; the log ends at seq 3") ||
		!strings.Contains(res.stdout, "truncated") {
		t.Fatalf("truncated: %d %q %q", res.code, res.stdout, res.stderr)
	}
}

// rawDB opens the database file directly, as someone with write access to
// it would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
