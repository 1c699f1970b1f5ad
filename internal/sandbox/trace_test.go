package sandbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// TestLifecycleSpans (docs/tracing.md): a create and a kill asked for
// under a request's span are its children, with the sandbox, template,
// backend and reason; a pause and a delete the manager makes on its own
// (idle timeout, paused retention) are root spans that say why.
func TestLifecycleSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	restore := telemetry.Install(tp)
	defer restore()
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "trace-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	os.Chmod(stateDir, 0o755)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "p-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	b, err := fake.New(fake.Config{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{}, st, b, coldTemplate{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var mu sync.Mutex
	now := time.Now()
	m.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	rctx, req := telemetry.Start(ctx, "POST /v1/sandboxes")
	sb, err := m.Create(rctx, CreateRequest{Owner: "p-1", Isolation: fake.ID, IdleTimeout: 10 * time.Minute, PausedRetention: time.Hour})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Kill(ctx, sb.ID, "test over") })
	m.reapLifetimes(ctx) // first look: active now
	advance(11 * time.Minute)
	m.reapLifetimes(ctx) // idle: paused
	advance(2 * time.Hour)
	m.reapLifetimes(ctx) // paused past its retention: deleted

	find := func(name string, parent bool) sdktrace.ReadOnlySpan {
		for _, s := range sr.Ended() {
			if s.Name() == name && s.Parent().IsValid() == parent {
				return s
			}
		}
		t.Fatalf("no span %s (child: %v) among %d", name, parent, len(sr.Ended()))
		return nil
	}
	attr := func(s sdktrace.ReadOnlySpan, k string) string {
		for _, kv := range s.Attributes() {
			if kv.Key == attribute.Key(k) {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	c := find("sandbox.create", true)
	if c.Parent().SpanID() != req.SpanContext().SpanID() || attr(c, "warden.sandbox_id") != sb.ID ||
		attr(c, "warden.sandbox.template") != "base" || attr(c, "warden.sandbox.backend") != fake.ID || attr(c, "warden.sandbox.trigger") != "" {
		t.Fatalf("create span: parent %s attrs %v", c.Parent().SpanID(), c.Attributes())
	}
	p := find("sandbox.pause", false)
	if attr(p, "warden.sandbox.trigger") != "idle_pause" || attr(p, "warden.sandbox_id") != sb.ID {
		t.Fatalf("idle pause span: %v", p.Attributes())
	}
	k := find("sandbox.kill", false)
	if attr(k, "warden.sandbox.trigger") != "retention_delete" || attr(k, "warden.sandbox.reason") != "paused past its retention" {
		t.Fatalf("retention kill span: %v", k.Attributes())
	}

	// A requested kill is the request's child.
	sb2, err := m.Create(ctx, CreateRequest{Owner: "p-1", Isolation: fake.ID})
	if err != nil {
		t.Fatal(err)
	}
	rctx, req = telemetry.Start(ctx, "DELETE /v1/sandboxes/{id}")
	if err := m.Kill(rctx, sb2.ID, "killed: by the test"); err != nil {
		t.Fatal(err)
	}
	req.End()
	var kill sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "sandbox.kill" && s.Parent().SpanID() == req.SpanContext().SpanID() {
			kill = s
		}
	}
	if kill == nil || attr(kill, "warden.sandbox.reason") != "killed" || attr(kill, "warden.sandbox_id") != sb2.ID {
		t.Fatalf("requested kill span: %v", kill)
	}
}
