package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestAuditRetentionVerify: after audit retention deleted the oldest
// events, 'warden audit verify --checkpoint' starts from the anchor the
// daemon serves, still checks checkpoints older than it, and catches a
// tampered anchor; 'warden audit export' says where the log starts.
func TestAuditRetentionVerify(t *testing.T) {
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
	old := time.Now().Add(-72 * time.Hour)
	add := func(n int, at time.Time) {
		for i := range n {
			if _, err := l.Append(ctx, audit.Event{PrincipalID: "pr-1", Action: "sandbox.create", Target: fmt.Sprint("sb-", i),
				Outcome: "success", Time: at}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(4, old)
	if _, _, err := pub.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	add(3, old)
	if _, _, err := pub.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	add(2, time.Now())
	if res, err := pub.Prune(ctx, l, time.Now().Add(-24*time.Hour), 0); err != nil || res.Size != 7 {
		t.Fatalf("Prune: %+v %v", res, err)
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
			page.Events = append(page.Events, warden.AuditEvent{Seq: e.Seq, Time: e.Time, PrincipalID: e.PrincipalID, Action: e.Action,
				Target: e.Target, Outcome: e.Outcome, PrevHash: e.PrevHash, Hash: e.Hash})
			page.NextAfter = e.Seq
		}
		writeJSON(w, 200, page)
	})
	d.handle("GET /v1/audit/anchor", func(w http.ResponseWriter, r *http.Request) {
		a, err := st.GetAuditAnchor(r.Context())
		if err != nil {
			t.Error(err)
		}
		cps, _ := st.ListAuditCheckpoints(r.Context())
		writeJSON(w, 200, warden.AuditAnchor{Size: a.Size, Hash: a.Hash, Nodes: a.Nodes, PrunedAt: a.PrunedAt,
			Checkpoint: &warden.AuditAnchorCheckpoint{N: a.CheckpointN, Note: cps[a.CheckpointN-1].Note}})
	})
	d.handle("GET /v1/audit/verify", func(w http.ResponseWriter, r *http.Request) {
		rep, err := l.Verify(r.Context())
		if err != nil {
			t.Error(err)
		}
		writeJSON(w, 200, rep)
	})

	res := run(t, d, "audit", "verify", "--checkpoint", notes, "--key", pubFile)
	if res.code != 0 || res.stdout != "audit log ok: 2 events checked (events 1 to 7 were deleted by audit retention; the log starts at seq 8)\n" {
		t.Fatalf("pruned: %d %q %q", res.code, res.stdout, res.stderr)
	}
	res = run(t, d, "audit", "verify")
	if res.code != 0 || !strings.Contains(res.stdout, "events 1 to 7 were deleted by audit retention") {
		t.Fatalf("daemon-side verify: %d %q %q", res.code, res.stdout, res.stderr)
	}
	// Only the first checkpoint (4 events, all deleted) held: checked by
	// its consistency proof to the anchor.
	all, err := os.ReadFile(notes)
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(string(all), "\n\n", 3)
	firstNote := filepath.Join(dir, "first.txt")
	if err := os.WriteFile(firstNote, []byte(first[0]+"\n\n"+first[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := run(t, d, "audit", "verify", "--checkpoint", firstNote, "--key", pubFile); res.code != 0 {
		t.Fatalf("first checkpoint only: %d %q %q", res.code, res.stdout, res.stderr)
	}
	res = run(t, d, "audit", "export")
	if res.code != 0 || strings.Count(res.stdout, "\n") != 2 || !strings.Contains(res.stderr, "events 1 to 7 were deleted by audit retention: the export starts at seq 8") {
		t.Fatalf("export: %d %q %q", res.code, res.stdout, res.stderr)
	}

	// The anchor's hash altered in the database.
	db := rawDB(t, filepath.Join(dir, "warden.db"))
	if _, err := db.Exec(`UPDATE audit_anchor SET hash = ?`, strings.Repeat("cd", 32)); err != nil {
		t.Fatal(err)
	}
	res = run(t, d, "audit", "verify", "--checkpoint", notes, "--key", pubFile)
	if res.code != 1 || !strings.Contains(res.stdout, "seq 7: anchor: retention anchor: hash cdcdcdcdcdcd is not event 7's in checkpoint 2") {
		t.Fatalf("tampered anchor: %d %q %q", res.code, res.stdout, res.stderr)
	}
	res = run(t, d, "audit", "verify")
	if res.code != 1 || !strings.Contains(res.stdout, "seq 7: anchor: the retention anchor") {
		t.Fatalf("tampered anchor, daemon-side: %d %q %q", res.code, res.stdout, res.stderr)
	}
}
