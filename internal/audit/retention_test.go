package audit_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// appendAt appends n events dated at.
func (e *signedEnv) appendAt(t *testing.T, n int, at time.Time) {
	t.Helper()
	for i := range n {
		if _, err := e.log.Append(context.Background(), audit.Event{PrincipalID: "pr-1", Action: "sandbox.exec",
			Target: fmt.Sprint("sb-", i), Outcome: audit.OutcomeSuccess, Time: at}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *signedEnv) cp(t *testing.T) {
	t.Helper()
	e.now = e.now.Add(time.Hour)
	if _, _, err := e.pub.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// anchorOf reads the store's anchor in the checker's form.
func anchorOf(t *testing.T, e *signedEnv) *auditcheck.Anchor {
	t.Helper()
	a, err := e.st.GetAuditAnchor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cps, err := e.st.ListAuditCheckpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, vkey := e.files(t)
	an, err := auditcheck.ParseAnchor(a.Size, a.Hash, cps[a.CheckpointN-1].Note, a.Nodes, vkey)
	if err != nil {
		t.Fatal(err)
	}
	return an
}

// checkPruned runs the client-side checker over the pruned log with the
// given checkpoints (all of them when nil).
func checkPruned(t *testing.T, e *signedEnv, data []byte) auditcheck.Report {
	t.Helper()
	all, vkey := e.files(t)
	if data == nil {
		data = all
	}
	cps, err := auditcheck.ParseCheckpoints(data, vkey)
	if err != nil {
		t.Fatal(err)
	}
	var a *auditcheck.Anchor
	if _, err := e.st.GetAuditAnchor(context.Background()); err == nil {
		a = anchorOf(t, e)
	}
	lc := auditcheck.NewLogCheckerFrom(cps, a)
	if err := e.st.WalkAudit(context.Background(), func(ev audit.Event) error {
		lc.Add(ev.Seq, ev.PrevHash, ev.Hash)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lc.Finish()
}

// notes splits the checkpoint file into its notes.
func notes(t *testing.T, e *signedEnv) []string {
	data, _ := e.files(t)
	parts := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	var out []string
	for i := 0; i+1 < len(parts); i += 2 {
		out = append(out, parts[i]+"\n\n"+parts[i+1]+"\n")
	}
	return out
}

// pruned builds a log of 18 old events (checkpoints at 10 and 15) and 5
// recent ones, and prunes what is older than a day: up to 15.
func pruned(t *testing.T) *signedEnv {
	t.Helper()
	e := setupSigned(t)
	e.appendAt(t, 10, t0)
	e.cp(t)
	e.appendAt(t, 5, t0.Add(time.Minute))
	e.cp(t)
	e.appendAt(t, 3, t0.Add(2*time.Minute))
	e.appendAt(t, 5, t0.Add(48*time.Hour))
	res, err := e.pub.Prune(context.Background(), e.log, t0.Add(24*time.Hour), 0)
	if err != nil || res.Deleted != 15 || res.Size != 15 {
		t.Fatalf("Prune: %+v %v", res, err)
	}
	return e
}

func TestRetentionPruneVerifies(t *testing.T) {
	e := pruned(t)
	ctx := context.Background()
	r := verify(t, e.log)
	if !r.OK || r.Checked != 8 || r.Pruned != 15 {
		t.Fatalf("Verify after prune: %+v", r)
	}
	if r, err := audit.VerifyStore(ctx, e.st, e.key, e.cpPath); err != nil || !r.OK || r.Pruned != 15 {
		t.Fatalf("VerifyStore after prune: %+v %v", r, err)
	}
	// Client side: every checkpoint, and only the old ones (both below
	// the boundary), still check.
	if r := checkPruned(t, e, nil); !r.OK || r.Checked != 8 || r.Pruned != 15 {
		t.Fatalf("checker after prune: %+v", r)
	}
	ns := notes(t, e)
	if len(ns) != 3 {
		t.Fatalf("%d checkpoints, want 3 (10, 15, and 23 made by Prune)", len(ns))
	}
	if r := checkPruned(t, e, []byte(ns[0])); !r.OK {
		t.Fatalf("old checkpoint only: %+v", r)
	}
	// Idempotent: nothing more to prune.
	if res, err := e.pub.Prune(ctx, e.log, t0.Add(24*time.Hour), 0); err != nil || res.Deleted != 0 {
		t.Fatalf("second Prune: %+v %v", res, err)
	}

	// A restarted daemon continues the chain and the tree from the anchor.
	e.close(t)
	e.log = e.newLogger(t, audit.Config{})
	seed, _ := audit.LoadOrCreateKey(filepath.Join(e.dir, "secrets", "checkpoint.key"))
	pub, err := audit.NewPublisher(ctx, audit.PublisherConfig{Store: e.st, Checkpoints: e.st, Seed: seed,
		Origin: "warden-audit/test", File: e.notes, PublicKeyFile: e.pubFile, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.pub = pub
	e.appendAt(t, 4, t0.Add(50*time.Hour))
	e.cp(t)
	e.appendAt(t, 2, t0.Add(72*time.Hour))
	// A second prune, batch by batch, moves the anchor to 27.
	res, err := e.pub.Prune(ctx, e.log, t0.Add(60*time.Hour), 5)
	if err != nil || res.Size != 27 || res.Deleted != 12 {
		t.Fatalf("Prune again: %+v %v", res, err)
	}
	if r := verify(t, e.log); !r.OK || r.Pruned != 27 || r.Checked != 2 {
		t.Fatalf("Verify after a second prune: %+v", r)
	}
	if r := checkPruned(t, e, nil); !r.OK || r.Pruned != 27 {
		t.Fatalf("checker after a second prune: %+v", r)
	}
	if r := checkPruned(t, e, []byte(notes(t, e)[0])); !r.OK {
		t.Fatalf("first checkpoint only, after a second prune: %+v", r)
	}
}

func TestRetentionRefusesBadLog(t *testing.T) {
	e := setupSigned(t)
	e.appendAt(t, 10, t0)
	e.cp(t)
	e.appendAt(t, 2, t0.Add(48*time.Hour))
	e.exec(t, `UPDATE audit_events SET target = 'forged' WHERE seq = 4`)
	if res, err := e.pub.Prune(context.Background(), e.log, t0.Add(24*time.Hour), 0); err == nil ||
		!strings.Contains(err.Error(), "event 4 does not match its hash") || res.Deleted != 0 {
		t.Fatalf("Prune of a modified log: %+v %v", res, err)
	}
	if _, err := e.st.GetAuditAnchor(context.Background()); err == nil {
		t.Fatal("an anchor was written")
	}
}

func TestRetentionTruncationDetected(t *testing.T) {
	e := pruned(t)
	e.exec(t, `DELETE FROM audit_events WHERE seq > 20`)
	expect(t, verify(t, e.log), want{21, audit.KindMissing})
	wantProblem(t, checkPruned(t, e, nil), auditcheck.KindMissing, 21, "the log was truncated")
	// Every retained event deleted: the log is just the anchor.
	e.exec(t, `DELETE FROM audit_events`)
	expect(t, verify(t, e.log), want{16, audit.KindMissing})
	wantProblem(t, checkPruned(t, e, nil), auditcheck.KindMissing, 16, "events 16 to 23 (8 events) are missing")
}

func TestRetentionFreshChainDetected(t *testing.T) {
	e := pruned(t)
	// Someone with the HMAC key rewrites the retained events as a fresh,
	// valid chain from the anchor on: the daemon's own check passes, the
	// signed checkpoints do not.
	prev := ""
	db := e.raw(t)
	rows, err := db.Query(`SELECT seq FROM audit_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for rows.Next() {
		var s int64
		_ = rows.Scan(&s)
		seqs = append(seqs, s)
	}
	rows.Close()
	a, _ := e.st.GetAuditAnchor(context.Background())
	prev = a.Hash
	for _, s := range seqs {
		ev := audit.Event{Seq: s, Time: t0.Add(48 * time.Hour), PrincipalID: "pr-x", Action: "sandbox.exec", Target: "other",
			Outcome: audit.OutcomeSuccess, Detail: []byte("{}"), PrevHash: prev}
		ev.Hash = hex.EncodeToString(audit.EventMACForTest(e.key, s, ev))
		if _, err := db.Exec(`UPDATE audit_events SET principal_id = ?, target = ?, prev_hash = ?, hash = ?, time = ?, detail = '{}' WHERE seq = ?`,
			ev.PrincipalID, ev.Target, ev.PrevHash, ev.Hash, ev.Time.UnixNano(), s); err != nil {
			t.Fatal(err)
		}
		prev = ev.Hash
	}
	r := checkPruned(t, e, nil)
	wantProblem(t, r, auditcheck.KindRewritten, 16, "do not hash to the root of checkpoint 3")
}

func TestRetentionDroppedCheckpointDetected(t *testing.T) {
	e := pruned(t)
	ns := notes(t, e)
	wantProblem(t, checkPruned(t, e, []byte(ns[0]+"\n"+ns[2])), auditcheck.KindCheckpoint, 23, "checkpoint 2 is missing")
}

func TestRetentionAnchorTampered(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		daemon    bool // the daemon's own check sees it
		client    string
	}{
		{"hash", `UPDATE audit_anchor SET hash = '` + strings.Repeat("ab", 32) + `'`, true, "is not event 15's"},
		{"size", `UPDATE audit_anchor SET size = 14`, true, "covers 15 events, not the 14 pruned"},
		{"nodes", `UPDATE audit_anchor SET nodes = '{}'`, false, "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := pruned(t)
			e.exec(t, tc.sql)
			r := verify(t, e.log)
			if tc.daemon {
				found := false
				for _, p := range r.Problems {
					found = found || (p.Kind == audit.KindAnchor && strings.Contains(p.Message, "retention anchor"))
				}
				if !found {
					t.Fatalf("daemon check: %+v", r)
				}
			}
			a, _ := e.st.GetAuditAnchor(context.Background())
			wantProblem(t, checkPruned(t, e, nil), auditcheck.KindAnchor, a.Size, tc.client)
		})
	}
	t.Run("deleted", func(t *testing.T) {
		e := pruned(t)
		e.exec(t, `DELETE FROM audit_anchor`)
		expect(t, verify(t, e.log), want{1, audit.KindMissing})
		wantProblem(t, checkPruned(t, e, nil), auditcheck.KindMissing, 1, "events 1 to 15")
	})
}

func TestRetentionOldCheckpointRewritten(t *testing.T) {
	// An old checkpoint (size 10 < 15) the log no longer matches: the
	// events were rewritten (with both keys) before the prune. A copy
	// of the original checkpoint held elsewhere catches it.
	e := setupSigned(t)
	e.appendAt(t, 10, t0)
	e.cp(t)
	saved := notes(t, e)[0]
	e.close(t)
	// Rewrite event 3 with the key and re-chain; re-sign by replacing
	// the checkpoints with fresh ones.
	db := e.raw(t)
	rows, _ := db.Query(`SELECT seq FROM audit_events ORDER BY seq`)
	var seqs []int64
	for rows.Next() {
		var s int64
		_ = rows.Scan(&s)
		seqs = append(seqs, s)
	}
	rows.Close()
	prev := audit.GenesisHash
	for _, s := range seqs {
		ev := audit.Event{Seq: s, Time: t0, PrincipalID: "pr-x", Action: "sandbox.exec", Target: "rewritten",
			Outcome: audit.OutcomeSuccess, Detail: []byte("{}"), PrevHash: prev}
		ev.Hash = hex.EncodeToString(audit.EventMACForTest(e.key, s, ev))
		if _, err := db.Exec(`UPDATE audit_events SET principal_id = ?, target = ?, prev_hash = ?, hash = ?, time = ?, detail = '{}' WHERE seq = ?`,
			ev.PrincipalID, ev.Target, ev.PrevHash, ev.Hash, ev.Time.UnixNano(), s); err != nil {
			t.Fatal(err)
		}
		prev = ev.Hash
	}
	if _, err := db.Exec(`DELETE FROM audit_checkpoints`); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(e.notes)
	e.log = e.newLogger(t, audit.Config{})
	e.pub = nil
	seed, _ := audit.LoadOrCreateKey(filepath.Join(e.dir, "secrets", "checkpoint.key"))
	pub, err := audit.NewPublisher(context.Background(), audit.PublisherConfig{Store: e.st, Checkpoints: e.st, Seed: seed,
		Origin: "warden-audit/test", File: e.notes, PublicKeyFile: e.pubFile, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.pub = pub
	e.cp(t) // checkpoint 1 again, of the rewritten 10
	e.appendAt(t, 5, t0.Add(time.Minute))
	e.cp(t)
	e.appendAt(t, 2, t0.Add(48*time.Hour))
	if _, err := e.pub.Prune(context.Background(), e.log, t0.Add(24*time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	// The saved original checkpoint 1 no longer checks: its proof to the
	// boundary fails.
	r := checkPruned(t, e, []byte(saved))
	wantProblem(t, r, auditcheck.KindRewritten, 10, "is not consistent with checkpoint 2", "were rewritten before events 1 to 15 were pruned")
	_ = store.ErrNotFound
}
