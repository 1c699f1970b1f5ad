package audit_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

// signedEnv is a log with a checkpoint publisher writing to a file.
type signedEnv struct {
	*env
	pub            *audit.Publisher
	notes, pubFile string
	now            time.Time
}

func setupSigned(t *testing.T) *signedEnv {
	t.Helper()
	e := &signedEnv{env: setup(t, audit.Config{}), now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	e.notes, e.pubFile = filepath.Join(e.dir, "audit-checkpoints.txt"), filepath.Join(e.dir, "audit-checkpoint.pub")
	seed, err := audit.LoadOrCreateKey(filepath.Join(e.dir, "secrets", "checkpoint.key"))
	if err != nil {
		t.Fatal(err)
	}
	e.pub, err = audit.NewPublisher(context.Background(), audit.PublisherConfig{Store: e.st, Checkpoints: e.st, Seed: seed,
		Origin: "warden-audit/test", File: e.notes, PublicKeyFile: e.pubFile, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// checkpoint appends n events, waits for them to be stored, and makes a
// checkpoint.
func (e *signedEnv) checkpoint(t *testing.T, n int) store.AuditCheckpoint {
	t.Helper()
	e.appendN(t, n)
	e.now = e.now.Add(time.Hour)
	cp, ok, err := e.pub.Checkpoint(context.Background())
	if err != nil || !ok {
		t.Fatalf("Checkpoint: %v %v", ok, err)
	}
	return cp
}

// check runs the checker over st's log against the checkpoint file data.
func check(t *testing.T, st store.Store, data []byte, vkey string) auditcheck.Report {
	t.Helper()
	cps, err := auditcheck.ParseCheckpoints(data, vkey)
	if err != nil {
		t.Fatalf("ParseCheckpoints: %v", err)
	}
	lc := auditcheck.NewLogChecker(cps)
	if err := st.WalkAudit(context.Background(), func(e audit.Event) error {
		lc.Add(e.Seq, e.PrevHash, e.Hash)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lc.Finish()
}

func (e *signedEnv) files(t *testing.T) ([]byte, string) {
	t.Helper()
	data, err := os.ReadFile(e.notes)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := os.ReadFile(e.pubFile)
	if err != nil {
		t.Fatal(err)
	}
	return data, string(vkey)
}

func wantProblem(t *testing.T, r auditcheck.Report, kind auditcheck.Kind, seq int64, msg ...string) {
	t.Helper()
	for _, p := range r.Problems {
		if p.Kind == kind && p.Seq == seq {
			for _, m := range msg {
				if !strings.Contains(p.Message, m) {
					t.Fatalf("problem %+v lacks %q", p, m)
				}
			}
			return
		}
	}
	t.Fatalf("no %s problem at seq %d in %+v", kind, seq, r.Problems)
}

func TestSignedCheckpointsIntact(t *testing.T) {
	e := setupSigned(t)
	e.checkpoint(t, 3)
	e.checkpoint(t, 4)
	if _, ok, err := e.pub.Checkpoint(context.Background()); ok || err != nil {
		t.Fatalf("a checkpoint with no new events: %v %v", ok, err)
	}
	cp := e.checkpoint(t, 1)
	if cp.N != 3 || cp.Size != 8 || !strings.Contains(cp.Note, "warden-audit/test\n8\n") || !strings.Contains(cp.Note, "\n— warden-audit ") {
		t.Fatalf("checkpoint %+v", cp)
	}
	data, vkey := e.files(t)
	if r := check(t, e.st, data, vkey); !r.OK || r.Checked != 8 {
		t.Fatalf("intact log: %+v", r)
	}
	// One old checkpoint alone still verifies the grown log.
	e.appendN(t, 5)
	first := strings.SplitN(string(data), "\n\n", 3)
	if r := check(t, e.st, []byte(first[0]+"\n\n"+first[1]), vkey); !r.OK || r.Checked != 13 {
		t.Fatalf("grown log against checkpoint 1: %+v", r)
	}
	cps, err := e.st.ListAuditCheckpoints(context.Background())
	if err != nil || len(cps) != 3 {
		t.Fatalf("stored checkpoints %d %v", len(cps), err)
	}
	// A new publisher (a restart) continues the numbering and the chain.
	seed, _ := audit.LoadOrCreateKey(filepath.Join(e.dir, "secrets", "checkpoint.key"))
	pub2, err := audit.NewPublisher(context.Background(), audit.PublisherConfig{Store: e.st, Checkpoints: e.st, Seed: seed,
		Origin: "warden-audit/test", File: e.notes, Now: func() time.Time { return e.now.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := pub2.Checkpoint(context.Background()); err != nil || !ok || cp.N != 4 || cp.Size != 13 {
		t.Fatalf("after restart: %+v %v %v", cp, ok, err)
	}
	data, _ = e.files(t)
	if r := check(t, e.st, data, vkey); !r.OK {
		t.Fatalf("after restart: %+v", r)
	}
}

// TestSignedTruncation: deleting the newest events (and the HMAC
// checkpoint file with them) is caught by a saved signed checkpoint.
func TestSignedTruncation(t *testing.T) {
	e := setupSigned(t)
	e.checkpoint(t, 5)
	e.checkpoint(t, 5)
	data, vkey := e.files(t)
	e.close(t)
	e.exec(t, `DELETE FROM audit_events WHERE seq > 6`)
	r := check(t, e.st, data, vkey)
	wantProblem(t, r, auditcheck.KindMissing, 7, "events 7 to 10", "the log ends at seq 6", "checkpoint 2 (10 events", "truncated")
	if len(r.Problems) != 1 {
		t.Fatalf("problems %+v", r.Problems)
	}
}

// TestSignedRewrite: someone with the HMAC key rebuilds the whole log as
// a fresh, valid chain (the HMAC verification passes); the signed
// checkpoints catch it and say which events changed.
func TestSignedRewrite(t *testing.T) {
	e := setupSigned(t)
	e.checkpoint(t, 4)
	e.checkpoint(t, 4)
	data, vkey := e.files(t)
	e.close(t)

	// A fresh log with the same key: the first 5 events as they were,
	// then different ones.
	dir := t.TempDir()
	st2, err := sqlite.Open(context.Background(), filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	l2, err := audit.New(context.Background(), audit.Config{Store: st2, Key: e.key, CheckpointPath: filepath.Join(dir, "cp"), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var orig []audit.Event
	if err := e.st.WalkAudit(context.Background(), func(ev audit.Event) error { orig = append(orig, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, ev := range orig {
		ev.Seq, ev.PrevHash, ev.Hash = 0, "", ""
		if i == 5 {
			ev.Target = "sb-innocent"
		}
		if _, err := l2.Append(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := l2.Verify(context.Background()); err != nil || !rep.OK {
		t.Fatalf("the rewritten chain should pass the HMAC check: %+v %v", rep, err)
	}
	l2.Close()
	r := check(t, st2, data, vkey)
	wantProblem(t, r, auditcheck.KindRewritten, 5, "the first 8 events do not hash to the root of checkpoint 2", "events 5 to 8")
	if len(r.Problems) != 1 {
		t.Fatalf("problems %+v", r.Problems)
	}
}

// TestSignedCheckpointDropped: removing a checkpoint from the series (or
// altering one) is caught.
func TestSignedCheckpointDropped(t *testing.T) {
	e := setupSigned(t)
	for range 4 {
		e.checkpoint(t, 2)
	}
	data, vkey := e.files(t)
	notes := strings.Split(string(data), "\n\n") // text, sigs, text, sigs...
	if len(notes) != 8 {
		t.Fatalf("%d parts", len(notes))
	}
	dropped := strings.Join(append(append([]string{}, notes[:2]...), notes[4:]...), "\n\n")
	r := check(t, e.st, []byte(dropped), vkey)
	wantProblem(t, r, auditcheck.KindCheckpoint, 6, "checkpoint 2 is missing", "checkpoint 3 (6 events", "follows checkpoint 1 (2 events)")
	if len(r.Problems) != 1 {
		t.Fatalf("problems %+v", r.Problems)
	}
	// An altered note does not verify.
	altered := strings.Replace(string(data), "warden-audit/test\n4\n", "warden-audit/test\n3\n", 1)
	if _, err := auditcheck.ParseCheckpoints([]byte(altered), vkey); err == nil || !strings.Contains(err.Error(), "note 2") {
		t.Fatalf("altered note: %v", err)
	}
	// Another key's notes do not verify either.
	other := make([]byte, audit.SigningKeySize)
	rand.Read(other)
	_, vkey2, _ := audit.Keys(other, "warden-audit")
	if _, err := auditcheck.ParseCheckpoints(data, vkey2); err == nil || !strings.Contains(err.Error(), "note 1") {
		t.Fatalf("another key: %v", err)
	}
}
