package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	warden "github.com/warden-sandbox/warden/sdk/go"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

// TestAuditCheckpointSDKCrossCheck: the notes the daemon's Publisher
// signs verify with the SDK's stdlib-only auditcheck package (what
// 'warden audit verify --checkpoint' uses, and the only checker: the
// daemon builds its tree with the same package) and parse to the
// checkpoints of the log's roots; through the CLI, truncation, a rewrite
// and a dropped checkpoint are each reported.
func TestAuditCheckpointSDKCrossCheck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, err := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	if err != nil {
		t.Fatal(err)
	}
	seed, err := audit.LoadOrCreateKey(filepath.Join(dir, "cp.key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.New(ctx, audit.Config{Store: st, Key: key, CheckpointPath: filepath.Join(dir, "audit.checkpoint"), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	notesFile, pubFile := filepath.Join(dir, "notes.txt"), filepath.Join(dir, "cp.pub")
	pub, err := audit.NewPublisher(ctx, audit.PublisherConfig{Store: st, Checkpoints: st, Seed: seed, Origin: "warden-audit/cross",
		File: notesFile, PublicKeyFile: pubFile, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// Checkpoints at 4, 7 and 10 events.
	seq := 0
	for _, n := range []int{4, 3, 3} {
		for range n {
			seq++
			if _, err := l.Append(ctx, audit.Event{PrincipalID: "pr-1", Action: "sandbox.create", Target: fmt.Sprint("sb-", seq), Outcome: "success"}); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(time.Hour)
		if _, ok, err := pub.Checkpoint(ctx); err != nil || !ok {
			t.Fatalf("Checkpoint: %v %v", ok, err)
		}
	}
	var events []store.AuditEvent
	for len(events) < 10 {
		evs, err := st.ListAudit(ctx, store.AuditFilter{After: int64(len(events)), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		events = append(events, evs...)
	}
	if len(events) != 10 {
		t.Fatalf("%d events stored, want 10", len(events))
	}
	notes, err := os.ReadFile(notesFile)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}

	// The Publisher's notes parse, in order, to checkpoints whose roots
	// are those of the log's first Size events.
	ours, err := auditcheck.ParseCheckpoints(notes, string(vkey))
	if err != nil {
		t.Fatalf("auditcheck.ParseCheckpoints of the Publisher's notes: %v", err)
	}
	if len(ours) != 3 {
		t.Fatalf("%d checkpoints, want 3", len(ours))
	}
	var tree auditcheck.Tree
	roots := map[int64][32]byte{}
	for _, e := range events {
		if err := tree.Append(e.Hash); err != nil {
			t.Fatal(err)
		}
		roots[tree.Size()] = tree.Root()
	}
	for i, c := range ours {
		if c.N != int64(i+1) || c.Size != []int64{4, 7, 10}[i] || c.Root != roots[c.Size] {
			t.Fatalf("checkpoint %d: %+v, want number %d over %d events with the log's root", i+1, c, i+1, []int64{4, 7, 10}[i])
		}
	}
	// A note altered after signing fails.
	altered := strings.Replace(string(notes), "\n7\n", "\n8\n", 1)
	if _, err := auditcheck.ParseCheckpoints([]byte(altered), string(vkey)); err == nil {
		t.Fatal("auditcheck accepted an altered note")
	}

	// The notes one by one, for a file with one dropped.
	stored, err := st.ListAuditCheckpoints(ctx)
	if err != nil || len(stored) != 3 {
		t.Fatalf("ListAuditCheckpoints: %d %v", len(stored), err)
	}
	droppedFile := filepath.Join(dir, "dropped.txt")
	if err := os.WriteFile(droppedFile, []byte(stored[0].Note+"\n"+stored[2].Note), 0o600); err != nil {
		t.Fatal(err)
	}

	// The fake daemon serves a copy of the log that the cases tamper with.
	var mu sync.Mutex
	served := events
	d := newFakeDaemon(t)
	d.handle("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		page := warden.AuditPage{Events: []warden.AuditEvent{}, NextAfter: after}
		for _, e := range served {
			if e.Seq <= after || len(page.Events) == 3 {
				continue
			}
			page.Events = append(page.Events, warden.AuditEvent{Seq: e.Seq, Time: e.Time, PrincipalID: e.PrincipalID, Action: e.Action,
				Target: e.Target, Outcome: e.Outcome, PrevHash: e.PrevHash, Hash: e.Hash})
			page.NextAfter = e.Seq
		}
		writeJSON(w, 200, page)
	})
	rewritten := append([]store.AuditEvent(nil), events...)
	forged := strings.Repeat("ab", 32)
	rewritten[5].Hash = forged // seq 6, and seq 7 relinked to it: the chain holds
	rewritten[6].PrevHash = forged

	cases := []struct {
		name   string
		log    []store.AuditEvent
		file   string
		code   int
		stdout []string // each must appear
	}{
		{"intact", events, notesFile, 0, []string{"audit log ok: 10 events checked\n"}},
		{"truncated", events[:8], notesFile, 1, []string{"seq 9: missing: events 9 to 10 (2 events) are missing; the log ends at seq 8 " +
			"but checkpoint 3 (10 events, 2026-12-01T15:00:00Z) covers 10 events: the log was truncated"}},
		{"rewritten", rewritten, notesFile, 1, []string{
			"seq 5: rewritten: the first 7 events do not hash to the root of checkpoint 2 (7 events, 2026-12-01T14:00:00Z): " +
				"the log was rewritten after it was signed; the change is in events 5 to 7",
			"seq 5: rewritten: the first 10 events do not hash to the root of checkpoint 3"}},
		{"dropped checkpoint", events, droppedFile, 1, []string{"seq 10: checkpoint: checkpoint 2 is missing: checkpoint 3 (10 events, " +
			"2026-12-01T15:00:00Z) follows checkpoint 1 (4 events): a checkpoint was dropped"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			served = tc.log
			mu.Unlock()
			res := run(t, d, "audit", "verify", "--checkpoint", tc.file, "--key", pubFile)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d: %q %q", res.code, tc.code, res.stdout, res.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(res.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
				}
			}
			if tc.code != 0 && !strings.Contains(res.stderr, "audit log verification failed") {
				t.Errorf("stderr: %q", res.stderr)
			}

		})
	}
}
