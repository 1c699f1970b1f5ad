package audit_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

type env struct {
	dir, dbPath, keyPath, cpPath string
	st                           *sqlite.Store
	key                          []byte
	log                          *audit.Logger
}

func setup(t testing.TB, cfg audit.Config) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{
		dir:     dir,
		dbPath:  filepath.Join(dir, "warden.db"),
		keyPath: filepath.Join(dir, "secrets", "audit.key"),
		cpPath:  filepath.Join(dir, "secrets", "audit.checkpoint"),
	}
	var err error
	if e.st, err = sqlite.Open(context.Background(), e.dbPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	if e.key, err = audit.LoadOrCreateKey(e.keyPath); err != nil {
		t.Fatal(err)
	}
	e.log = e.newLogger(t, cfg)
	return e
}

func (e *env) newLogger(t testing.TB, cfg audit.Config) *audit.Logger {
	t.Helper()
	cfg.Store, cfg.Key, cfg.CheckpointPath = e.st, e.key, e.cpPath
	l, err := audit.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("audit.New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (e *env) appendN(t testing.TB, n int) []audit.Event {
	t.Helper()
	var out []audit.Event
	for i := range n {
		ev, err := e.log.Append(context.Background(), audit.Event{
			RequestID:   fmt.Sprint("req-", i),
			PrincipalID: "pr-admin",
			Action:      "sandbox.create",
			Target:      fmt.Sprintf("sb-%03d", i),
			Outcome:     audit.OutcomeSuccess,
			Detail:      json.RawMessage(fmt.Sprintf(`{"template": "base", "n": %d}`, i)),
		})
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, ev)
	}
	return out
}

// close closes the current Logger, as a daemon shutdown does.
func (e *env) close(t testing.TB) {
	t.Helper()
	if err := e.log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// raw opens the database file directly, as someone with write access to
// it (but not to the key) would.
func (e *env) raw(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", e.dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (e *env) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := e.raw(t).Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func verify(t *testing.T, l *audit.Logger) audit.Report {
	t.Helper()
	r, err := l.Verify(t.Context())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return r
}

type want struct {
	seq  int64
	kind audit.Kind
}

// expect checks that the report lists exactly these (seq, kind) pairs.
func expect(t *testing.T, r audit.Report, ws ...want) {
	t.Helper()
	var got []want
	for _, p := range r.Problems {
		got = append(got, want{p.Seq, p.Kind})
		if p.Message == "" {
			t.Errorf("problem %d %s has no message", p.Seq, p.Kind)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ws) {
		t.Errorf("problems = %v, want %v\n%s", got, ws, describe(r))
	}
	if r.OK != (len(ws) == 0) {
		t.Errorf("OK = %v with %d problems", r.OK, len(r.Problems))
	}
}

func describe(r audit.Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  %d %s: %s\n", p.Seq, p.Kind, p.Message)
	}
	return b.String()
}

func TestAppendAndVerify(t *testing.T) {
	e := setup(t, audit.Config{})
	evs := e.appendN(t, 100)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		wantPrev := audit.GenesisHash
		if i > 0 {
			wantPrev = evs[i-1].Hash
		}
		if ev.PrevHash != wantPrev {
			t.Fatalf("event %d prev_hash %s, want %s", ev.Seq, ev.PrevHash, wantPrev)
		}
		if len(ev.Hash) != 64 {
			t.Fatalf("event %d hash %q", ev.Seq, ev.Hash)
		}
	}
	if got := string(evs[3].Detail); got != `{"n":3,"template":"base"}` {
		t.Errorf("detail stored as %s, want canonical form", got)
	}
	r := verify(t, e.log)
	expect(t, r)
	if r.Checked != 100 {
		t.Errorf("Checked = %d, want 100", r.Checked)
	}
	if seq, hash := e.log.Head(); seq != 100 || hash != evs[99].Hash {
		t.Errorf("Head = %d %s", seq, hash)
	}
	// The checkpoint file is private.
	fi, err := os.Stat(e.cpPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint mode %o, want 600", fi.Mode().Perm())
	}
	// A fresh Logger (a daemon restart) continues the chain.
	e.close(t)
	l2 := e.newLogger(t, audit.Config{})
	e.log = l2
	more := e.appendN(t, 1)
	if more[0].Seq != 101 || more[0].PrevHash != evs[99].Hash {
		t.Errorf("after restart: seq %d prev %s", more[0].Seq, more[0].PrevHash)
	}
	expect(t, verify(t, l2))
}

func TestModified(t *testing.T) {
	for _, c := range []struct{ name, sql string }{
		{"detail", `UPDATE audit_events SET detail = '{"n":37,"template":"evil"}' WHERE seq = 37`},
		{"target", `UPDATE audit_events SET target = 'sb-other' WHERE seq = 37`},
		{"outcome", `UPDATE audit_events SET outcome = 'denied' WHERE seq = 37`},
		{"time", `UPDATE audit_events SET time = time + 1 WHERE seq = 37`},
		{"hash", `UPDATE audit_events SET hash = '` + strings.Repeat("ab", 32) + `' WHERE seq = 37`},
		{"prev hash", `UPDATE audit_events SET prev_hash = '` + strings.Repeat("cd", 32) + `' WHERE seq = 37`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t, audit.Config{})
			e.appendN(t, 100)
			e.exec(t, c.sql)
			expect(t, verify(t, e.log), want{37, audit.KindModified})
		})
	}
	t.Run("first and last", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		e.exec(t, `UPDATE audit_events SET action = 'x' WHERE seq IN (1, 100)`)
		expect(t, verify(t, e.log), want{1, audit.KindModified}, want{100, audit.KindModified})
	})
}

func TestMissing(t *testing.T) {
	t.Run("one", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		e.exec(t, `DELETE FROM audit_events WHERE seq = 40`)
		r := verify(t, e.log)
		expect(t, r, want{40, audit.KindMissing})
		if r.Checked != 99 {
			t.Errorf("Checked = %d, want 99", r.Checked)
		}
	})
	t.Run("range", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		e.exec(t, `DELETE FROM audit_events WHERE seq BETWEEN 40 AND 42`)
		r := verify(t, e.log)
		expect(t, r, want{40, audit.KindMissing})
		if !strings.Contains(r.Problems[0].Message, "40 to 42") {
			t.Errorf("message %q does not name the range", r.Problems[0].Message)
		}
	})
	t.Run("first", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 10)
		e.exec(t, `DELETE FROM audit_events WHERE seq = 1`)
		expect(t, verify(t, e.log), want{1, audit.KindMissing})
	})
}

func TestReordered(t *testing.T) {
	swap := func(t *testing.T, e *env, a, b int64) {
		t.Helper()
		e.exec(t, `UPDATE audit_events SET seq = -1 WHERE seq = ?`, a)
		e.exec(t, `UPDATE audit_events SET seq = ? WHERE seq = ?`, a, b)
		e.exec(t, `UPDATE audit_events SET seq = ? WHERE seq = -1`, b)
	}
	t.Run("adjacent", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		swap(t, e, 10, 11)
		expect(t, verify(t, e.log), want{10, audit.KindReordered}, want{11, audit.KindReordered})
	})
	t.Run("distant", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		swap(t, e, 20, 70)
		r := verify(t, e.log)
		expect(t, r, want{20, audit.KindReordered}, want{70, audit.KindReordered})
		if !strings.Contains(r.Problems[0].Message, "written as seq 70") {
			t.Errorf("message %q does not say where the event came from", r.Problems[0].Message)
		}
	})
	t.Run("first and last", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		swap(t, e, 1, 100)
		expect(t, verify(t, e.log), want{1, audit.KindReordered}, want{100, audit.KindReordered})
	})
	t.Run("moved into a gap", func(t *testing.T) {
		e := setup(t, audit.Config{})
		e.appendN(t, 100)
		e.exec(t, `DELETE FROM audit_events WHERE seq = 50`)
		e.exec(t, `UPDATE audit_events SET seq = 50 WHERE seq = 30`)
		expect(t, verify(t, e.log), want{30, audit.KindMissing}, want{50, audit.KindReordered})
	})
}

func TestTruncatedTail(t *testing.T) {
	e := setup(t, audit.Config{})
	e.appendN(t, 100)
	e.exec(t, `DELETE FROM audit_events WHERE seq > 95`)

	// The running logger knows its head.
	r := verify(t, e.log)
	expect(t, r, want{96, audit.KindMissing})
	if !strings.Contains(r.Problems[0].Message, "checkpoint") {
		t.Errorf("message %q does not mention the checkpoint", r.Problems[0].Message)
	}

	// After a restart the checkpoint file tells, offline too.
	e.close(t)
	rs, err := audit.VerifyStore(t.Context(), e.st, e.key, e.cpPath)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, rs, want{96, audit.KindMissing})

	e.log = e.newLogger(t, audit.Config{})
	expect(t, verify(t, e.log), want{96, audit.KindMissing})

	// New events continue after the checkpoint, so the gap stays visible.
	evs := e.appendN(t, 3)
	if evs[0].Seq != 101 {
		t.Errorf("after truncation the chain continues at %d, want 101", evs[0].Seq)
	}
	expect(t, verify(t, e.log), want{96, audit.KindMissing})

	// Deleting only the single newest event is caught as well.
	e.exec(t, `DELETE FROM audit_events WHERE seq = 103`)
	expect(t, verify(t, e.log), want{96, audit.KindMissing}, want{103, audit.KindMissing})
}

func TestEverythingDeleted(t *testing.T) {
	e := setup(t, audit.Config{})
	e.appendN(t, 20)
	e.close(t)
	e.exec(t, `DELETE FROM audit_events`)
	e.log = e.newLogger(t, audit.Config{})
	expect(t, verify(t, e.log), want{1, audit.KindMissing})
}

// TestPlainChainFails rewrites the log as an attacker without the key
// would: a correct-looking SHA-256 chain over the same fields.
func TestPlainChainFails(t *testing.T) {
	e := setup(t, audit.Config{})
	evs := e.appendN(t, 100)
	db := e.raw(t)
	prev := audit.GenesisHash
	for _, ev := range evs {
		if ev.Seq == 50 {
			ev.Target = "sb-forged"
		}
		p, _ := hex.DecodeString(prev)
		h := sha256.New()
		h.Write(p)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(ev.Seq))
		h.Write(n[:])
		binary.BigEndian.PutUint64(n[:], uint64(ev.Time.UnixNano()))
		h.Write(n[:])
		for _, f := range []string{ev.RequestID, ev.PrincipalID, ev.Action, ev.Target, ev.Outcome, string(ev.Detail)} {
			binary.BigEndian.PutUint32(n[:4], uint32(len(f)))
			h.Write(n[:4])
			h.Write([]byte(f))
		}
		sum := hex.EncodeToString(h.Sum(nil))
		if _, err := db.Exec(`UPDATE audit_events SET target = ?, prev_hash = ?, hash = ? WHERE seq = ?`, ev.Target, prev, sum, ev.Seq); err != nil {
			t.Fatal(err)
		}
		prev = sum
	}
	r := verify(t, e.log)
	if r.OK {
		t.Fatal("a plain SHA-256 chain verified")
	}
	var ws []want
	for s := int64(1); s <= 100; s++ {
		ws = append(ws, want{s, audit.KindModified})
	}
	expect(t, r, ws...)
}

func TestWrongKey(t *testing.T) {
	e := setup(t, audit.Config{})
	e.appendN(t, 5)
	e.close(t)
	other := make([]byte, audit.KeySize)
	if _, err := audit.New(t.Context(), audit.Config{Store: e.st, Key: other, CheckpointPath: e.cpPath}); err == nil {
		t.Error("New accepted a checkpoint written with another key")
	}
	if _, err := audit.VerifyStore(t.Context(), e.st, other, e.cpPath); err == nil {
		t.Error("VerifyStore accepted a checkpoint written with another key")
	}
	r, err := audit.VerifyStore(t.Context(), e.st, other, filepath.Join(e.dir, "nope"))
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Problems) != 6 { // 5 modified + no checkpoint
		t.Errorf("verify with another key:\n%s", describe(r))
	}
}

func TestCheckpointMissing(t *testing.T) {
	e := setup(t, audit.Config{})
	e.appendN(t, 10)
	e.close(t)
	if err := os.Remove(e.cpPath); err != nil {
		t.Fatal(err)
	}
	e.log = e.newLogger(t, audit.Config{})
	r := verify(t, e.log)
	expect(t, r, want{10, audit.KindMissing})
	if !strings.Contains(r.Problems[0].Message, "no checkpoint") {
		t.Errorf("message %q", r.Problems[0].Message)
	}
	// New wrote a fresh checkpoint: truncation from now on is caught.
	e.appendN(t, 2)
	e.exec(t, `DELETE FROM audit_events WHERE seq = 12`)
	expect(t, verify(t, e.log), want{10, audit.KindMissing}, want{12, audit.KindMissing})
}

func TestCheckpointTampered(t *testing.T) {
	e := setup(t, audit.Config{})
	e.appendN(t, 10)
	e.close(t)
	b, err := os.ReadFile(e.cpPath)
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]any
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatal(err)
	}
	cp["seq"] = 5
	b, _ = json.Marshal(cp)
	if err := os.WriteFile(e.cpPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.New(t.Context(), audit.Config{Store: e.st, Key: e.key, CheckpointPath: e.cpPath}); err == nil {
		t.Error("New accepted a checkpoint with a changed seq")
	}
	if err := os.Chmod(e.cpPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.New(t.Context(), audit.Config{Store: e.st, Key: e.key, CheckpointPath: e.cpPath}); err == nil {
		t.Error("New accepted a world-readable checkpoint")
	}
}

func readCheckpointSeq(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cp struct{ Seq int64 }
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatal(err)
	}
	return cp.Seq
}

func TestCheckpointBackground(t *testing.T) {
	e := setup(t, audit.Config{CheckpointInterval: 20 * time.Millisecond})
	e.appendN(t, 25)
	// The background writer catches up within about one interval.
	deadline := time.Now().Add(5 * time.Second)
	for readCheckpointSeq(t, e.cpPath) != 25 {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint stuck at %d, want 25", readCheckpointSeq(t, e.cpPath))
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.appendN(t, 5)
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readCheckpointSeq(t, e.cpPath); got != 30 {
		t.Errorf("after Close the checkpoint is at %d, want 30", got)
	}
	if err := e.log.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := e.log.Append(t.Context(), audit.Event{Action: "x", Outcome: audit.OutcomeSuccess}); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	e.exec(t, `DELETE FROM audit_events WHERE seq = 30`)
	r, err := audit.VerifyStore(t.Context(), e.st, e.key, e.cpPath)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, r, want{30, audit.KindMissing})
}

func TestCheckpointSynchronous(t *testing.T) {
	e := setup(t, audit.Config{CheckpointInterval: -1})
	for i := range 5 {
		ev := e.appendN(t, 1)[0]
		if got := readCheckpointSeq(t, e.cpPath); got != ev.Seq {
			t.Fatalf("append %d: checkpoint at %d, want %d", i, got, ev.Seq)
		}
	}
}

func TestCheckpointWriteFailure(t *testing.T) {
	e := setup(t, audit.Config{CheckpointInterval: -1})
	e.appendN(t, 1)
	// Make the checkpoint directory unwritable by replacing the file's
	// directory entry with a directory (works as root too).
	if err := os.Remove(e.cpPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.cpPath, 0o700); err != nil {
		t.Fatal(err)
	}
	ev, err := e.log.Append(t.Context(), audit.Event{Action: "x", Outcome: audit.OutcomeSuccess})
	if !errors.Is(err, audit.ErrCheckpoint) || ev.Seq != 2 {
		t.Errorf("Append with broken checkpoint: seq %d, %v; want the event and ErrCheckpoint", ev.Seq, err)
	}
}

func TestConcurrentAppend(t *testing.T) {
	e := setup(t, audit.Config{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if _, err := e.log.Append(context.Background(), audit.Event{
					Action: "sandbox.exec", Target: fmt.Sprintf("sb-%d", w), Outcome: audit.OutcomeSuccess,
					Detail: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	r := verify(t, e.log)
	expect(t, r)
	if r.Checked != 200 {
		t.Errorf("Checked = %d, want 200", r.Checked)
	}
}

func TestAppendValidation(t *testing.T) {
	e := setup(t, audit.Config{})
	ctx := t.Context()
	for _, ev := range []audit.Event{
		{Outcome: audit.OutcomeSuccess},
		{Action: "a", Outcome: "maybe"},
		{Action: "a", Outcome: audit.OutcomeSuccess, Detail: json.RawMessage(`{"a":`)},
		{Action: "a", Outcome: audit.OutcomeSuccess, Detail: json.RawMessage(`{} {}`)},
	} {
		if _, err := e.log.Append(ctx, ev); err == nil {
			t.Errorf("Append(%+v) succeeded", ev)
		}
	}
	// Caller-supplied chain fields are ignored; time is kept.
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	ev, err := e.log.Append(ctx, audit.Event{Seq: 99, Hash: "x", PrevHash: "y", Time: at, Action: "a", Outcome: audit.OutcomeDenied})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 || ev.PrevHash != audit.GenesisHash || !ev.Time.Equal(at) || string(ev.Detail) != "{}" {
		t.Errorf("stored %+v", ev)
	}
	// Equivalent JSON is stored identically; big numbers survive.
	a, _ := e.log.Append(ctx, audit.Event{Action: "a", Outcome: audit.OutcomeError, Detail: json.RawMessage(`{ "b": 1, "a": [12345678901234567890, 1.50] }`)})
	if got := string(a.Detail); got != `{"a":[12345678901234567890,1.50],"b":1}` {
		t.Errorf("canonical detail = %s", got)
	}
	expect(t, verify(t, e.log))
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "audit.key")
	k1, err := audit.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != audit.KeySize {
		t.Fatalf("key is %d bytes", len(k1))
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %o, want %o", p, fi.Mode().Perm(), want)
		}
	}
	k2, err := audit.LoadOrCreateKey(path)
	if err != nil || string(k1) != string(k2) {
		t.Errorf("reload gave a different key (%v)", err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.LoadOrCreateKey(path); err == nil {
		t.Error("group-readable key accepted")
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.LoadOrCreateKey(short); err == nil {
		t.Error("short key accepted")
	}
}

func TestNewValidation(t *testing.T) {
	e := setup(t, audit.Config{})
	for _, cfg := range []audit.Config{
		{Key: e.key, CheckpointPath: e.cpPath},
		{Store: e.st, Key: e.key[:16], CheckpointPath: e.cpPath},
		{Store: e.st, Key: e.key},
	} {
		if _, err := audit.New(t.Context(), cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	var _ store.Store = e.st
}

func benchmarkAppend(b *testing.B, cfg audit.Config) {
	b.Helper()
	e := setup(b, cfg)
	ctx := context.Background()
	ev := audit.Event{
		RequestID: "req-0123456789", PrincipalID: "pr-admin", Action: "sandbox.exec", Target: "sb-0123456789",
		Outcome: audit.OutcomeSuccess, Detail: json.RawMessage(`{"cmd":["ls","-l"],"cwd":"/home/user"}`),
	}
	for b.Loop() {
		if _, err := e.log.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend is the default policy: the checkpoint follows in the
// background, at most every 10 ms.
func BenchmarkAppend(b *testing.B) { benchmarkAppend(b, audit.Config{}) }

// BenchmarkAppendSyncCheckpoint writes the checkpoint (rename, no fsync)
// inside every Append.
func BenchmarkAppendSyncCheckpoint(b *testing.B) {
	benchmarkAppend(b, audit.Config{CheckpointInterval: -1})
}

// BenchmarkAppendSyncFsyncCheckpoint also fsyncs it.
func BenchmarkAppendSyncFsyncCheckpoint(b *testing.B) {
	benchmarkAppend(b, audit.Config{CheckpointInterval: -1, FsyncCheckpoint: true})
}

func BenchmarkVerify10k(b *testing.B) {
	e := setup(b, audit.Config{})
	e.appendN(b, 10000)
	for b.Loop() {
		r, err := e.log.Verify(context.Background())
		if err != nil || !r.OK {
			b.Fatal(err, r.Problems)
		}
	}
}
