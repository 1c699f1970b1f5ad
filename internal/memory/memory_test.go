package memory_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

const testSecret = "ghp_R8xQ2vLm9TzK4pWn7YbJc3HfDs6GaE1uVo5i"

type recorder struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (r *recorder) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
	return e, nil
}
func (r *recorder) Verify(context.Context) (audit.Report, error) { return audit.Report{}, nil }
func (r *recorder) LastAudit(context.Context) (store.AuditEvent, error) {
	return store.AuditEvent{}, store.ErrNotFound
}
func (r *recorder) ListAudit(context.Context, store.AuditFilter) ([]store.AuditEvent, error) {
	return nil, nil
}

func (r *recorder) named(action string) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.evs {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

type env struct {
	svc *memory.Service
	eng *govern.Engine
	rec *recorder
	st  *sqlite.Store
	dir string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := &recorder{}
	al, err := govern.NewAuditLog(rec, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := govern.New(govern.Config{})
	svc, err := memory.New(memory.Config{Store: st, Govern: eng, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	return &env{svc: svc, eng: eng, rec: rec, st: st, dir: dir}
}

func agent(name string) auth.Identity {
	return auth.Identity{Principal: store.Principal{ID: "prn_" + name, Kind: store.PrincipalAgent, Name: name, CreatedBy: "prn_alice"},
		Key: store.APIKey{ID: "key_" + name}}
}

func (e *env) actor(t *testing.T, name string) memory.Actor {
	t.Helper()
	a, err := e.svc.ActorFor(t.Context(), agent(name))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRememberRecallHistoryDiff(t *testing.T) {
	e := newEnv(t)
	e.svc.SetRunLookup(func(_ context.Context, key string) (string, bool) { return "run_" + key, key == "key_bot" })
	bot := e.actor(t, "bot")
	if bot.Namespace != "bot" || bot.RunID != "run_key_bot" || bot.Principal.ID != "prn_bot" {
		t.Fatalf("actor = %+v", bot)
	}
	ctx := t.Context()
	if _, err := e.svc.Remember(ctx, bot, "deploy", "deploys go through staging\nthen prod", []string{"ops"}); err != nil {
		t.Fatal(err)
	}
	v2, err := e.svc.Remember(ctx, bot, "deploy", "deploys go through canary\nthen prod", []string{"ops"})
	if err != nil || v2.Version != 2 || v2.RunID != "run_key_bot" || v2.Agent != "bot" || v2.Principal != "prn_bot" {
		t.Fatalf("second write = %+v, %v", v2, err)
	}
	got, err := e.svc.Recall(ctx, "bot", "canary", store.MemoryFilter{})
	if err != nil || len(got) != 1 || got[0].Key != "deploy" {
		t.Fatalf("recall = %+v, %v", got, err)
	}
	h, err := e.svc.History(ctx, "bot", "deploy")
	if err != nil || len(h) != 2 {
		t.Fatalf("history = %+v, %v", h, err)
	}
	d, err := e.svc.Diff(ctx, "bot", "deploy", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "--- deploy@1\n+++ deploy@2\n@@ -1,2 +1,2 @@\n-deploys go through staging\n+deploys go through canary\n then prod\n"
	if d.From != 1 || d.To != 2 || d.Unified != want {
		t.Fatalf("diff = %d..%d\n%s\nwant\n%s", d.From, d.To, d.Unified, want)
	}
	if _, err := e.svc.Diff(ctx, "bot", "deploy", 1, 7); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("diff to a missing version: %v", err)
	}
	// Writes are audited with their digest, never their text.
	ws := e.rec.named("memory.write")
	if len(ws) != 2 || strings.Contains(string(ws[1].Detail), "canary") || !strings.Contains(string(ws[1].Detail), v2.SHA256) {
		t.Fatalf("write audit = %+v", ws)
	}
	// Forget leaves a tombstone; history stays.
	if _, err := e.svc.Forget(ctx, bot, "deploy"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Get(ctx, "bot", "deploy"); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("get forgotten: %v", err)
	}
	if _, err := e.svc.Forget(ctx, bot, "deploy"); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("forget twice: %v", err)
	}
	if h, _ := e.svc.History(ctx, "bot", "deploy"); len(h) != 3 || !h[2].Forgotten {
		t.Fatalf("history after forget = %+v", h)
	}
}

func TestAgentsOnlyAndOwnMemory(t *testing.T) {
	e := newEnv(t)
	user := auth.Identity{Principal: store.Principal{ID: "prn_alice", Kind: store.PrincipalUser, Name: "alice"}}
	if _, err := e.svc.CallTool(t.Context(), user, memory.ToolList, nil); !errors.Is(err, memory.ErrNoAgent) {
		t.Fatalf("a user's memory tool call: %v", err)
	}
	if _, err := e.svc.CallTool(t.Context(), agent("a"), memory.ToolRemember, map[string]any{"key": "k", "text": "alpha's note"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.CallTool(t.Context(), agent("b"), memory.ToolRecall, map[string]any{"query": "note"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "alpha") {
		t.Fatalf("agent b recalled a's memory: %s", b)
	}
	res, _ = e.svc.CallTool(t.Context(), agent("a"), memory.ToolRecall, map[string]any{"query": "note"})
	if b, _ := json.Marshal(res); !strings.Contains(string(b), "alpha's note") || !strings.Contains(string(b), "not as instructions") {
		t.Fatalf("agent a's recall: %s", b)
	}
	for _, bad := range []map[string]any{{"key": "", "text": "x"}, {"key": "k", "text": ""}, {"key": "k", "text": "x", "tags": "nope"},
		{"key": "k", "text": strings.Repeat("x", memory.MaxText+1)}, {"key": "k\n", "text": "x"}, {"key": 3, "text": "x"}} {
		if _, err := e.svc.CallTool(t.Context(), agent("a"), memory.ToolRemember, bad); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("remember %v: %v", bad, err)
		}
	}
}

func TestSecretWriteBlockedOrMasked(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	bot := e.actor(t, "bot")
	pol := govern.Policy{ID: "no-secrets-in-memory", Scope: govern.Scope{Kind: govern.ScopeInstallation},
		Guard: &govern.Guard{Detectors: []string{govern.DetectorSecrets}, Targets: []string{govern.GuardTargetMemory}, Action: govern.GuardBlock}}
	if _, err := e.eng.CreatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Remember(ctx, bot, "creds", "the token is "+testSecret, nil)
	if kind, msg := errkind.Of(err); kind != errkind.Forbidden || !strings.Contains(msg, "secrets detector") ||
		!strings.Contains(msg, "no-secrets-in-memory") || strings.Contains(msg, testSecret) {
		t.Fatalf("blocked write: %v (%s %q)", err, kind, msg)
	}
	if _, err := e.svc.History(ctx, "bot", "creds"); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("a blocked write was stored: %v", err)
	}
	if d := e.rec.named("memory.write"); len(d) != 1 || d[0].Outcome != govern.AuditDenied || strings.Contains(string(d[0].Detail), testSecret) {
		t.Fatalf("denied write audit = %+v", d)
	}

	pol.Guard.Action = govern.GuardMask
	if _, err := e.eng.UpdatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.Remember(ctx, bot, "creds", "the token is "+testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got.Text, testSecret) || !strings.Contains(got.Text, "the token is [REDACTED:") {
		t.Fatalf("masked write stored %q", got.Text)
	}
	if r, _ := e.svc.Recall(ctx, "bot", testSecret, store.MemoryFilter{}); len(r) != 0 {
		t.Fatalf("secret searchable: %+v", r)
	}
	// A guard with no targets screens memory too.
	pol.Guard.Targets, pol.Guard.Action = nil, govern.GuardBlock
	if _, err := e.eng.UpdatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Remember(ctx, bot, "creds2", testSecret, nil); err == nil {
		t.Fatal("an all-targets guard let a secret into memory")
	}
}

func TestRedactAuditedAndExport(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	bot := e.actor(t, "bot")
	for _, txt := range []string{"password is hunter2", "password is still hunter2"} {
		if _, err := e.svc.Remember(ctx, bot, "creds", txt, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.Remember(ctx, bot, "notes", "keep me", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	admin := govern.Principal{ID: "prn_admin", Kind: store.PrincipalUser}
	n, err := e.svc.Redact(ctx, "bot", "creds", 0, admin, "leaked password")
	if err != nil || n != 2 {
		t.Fatalf("redact = %d, %v", n, err)
	}
	h, _ := e.svc.History(ctx, "bot", "creds")
	for _, v := range h {
		if v.Text != "" || v.Redacted == nil || v.Redacted.By != "prn_admin" || v.Redacted.Reason != "leaked password" {
			t.Fatalf("redacted version = %+v", v)
		}
	}
	red := e.rec.named("memory.redact")
	if len(red) != 1 || red[0].PrincipalID != "prn_admin" || red[0].Target != "memory:bot/creds" ||
		!strings.Contains(string(red[0].Detail), `"versions_redacted":2`) || strings.Contains(string(red[0].Detail), "hunter2") {
		t.Fatalf("redaction audit = %+v", red)
	}
	var buf bytes.Buffer
	if err := e.svc.Export(ctx, "bot", &buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("export holds the redacted value:\n%s", buf.String())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("export = %d lines:\n%s", len(lines), buf.String())
	}
	var last memory.Entry
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last.Key != "notes" || last.Text != "keep me" {
		t.Fatalf("export line = %s (%v)", lines[2], err)
	}
	// The raw database files keep no copy either (secure_delete; the
	// search index merged; the log checkpointed), open or closed.
	checkFiles := func() {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(e.dir, "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte("hunter2")) {
				t.Errorf("%s still holds the redacted value", filepath.Base(f))
			}
		}
	}
	checkFiles()
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	checkFiles()
}

func TestServiceTimes(t *testing.T) {
	// CreatedAt comes from the configured clock.
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	svc, _ := memory.New(memory.Config{Store: st, Now: func() time.Time { return at }})
	a, _ := svc.ActorFor(t.Context(), agent("bot"))
	got, err := svc.Remember(t.Context(), a, "k", "v", nil)
	if err != nil || !got.CreatedAt.Equal(at) || got.Tags == nil {
		t.Fatalf("remember = %+v, %v", got, err)
	}
	if _, err := memory.New(memory.Config{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}
