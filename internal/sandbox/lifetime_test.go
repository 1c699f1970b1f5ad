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

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

// TestLifetimes, with a clock the test moves: an idle sandbox is paused
// (an event first) at its idle timeout and a call wakes it; an open hold
// (a PTY) keeps it from idling; one paused past its retention is deleted
// with an event; one past its maximum lifetime is killed; a sandbox with
// an idle timeout alone has no countdown.
func TestLifetimes(t *testing.T) {
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "life-")
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
	var mu sync.Mutex
	var events []string
	cfg := Config{OnEvent: func(id string, ev backend.Event) {
		mu.Lock()
		events = append(events, id+" "+ev.Kind)
		mu.Unlock()
	}}
	m := New(cfg, st, b, coldTemplate{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now()
	m.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	saw := func(want string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e == want {
				return true
			}
		}
		return false
	}
	state := func(id string) State {
		sb, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return State(sb.State)
	}

	// Bad lifetimes are refused.
	for _, req := range []CreateRequest{
		{IdleTimeout: -time.Second}, {MaxLifetime: -time.Second}, {OnIdle: "sleep", IdleTimeout: time.Minute}, {OnIdle: "kill"},
	} {
		req.Owner, req.Isolation = "p-1", fake.ID
		if _, err := m.Create(ctx, req); err == nil {
			t.Fatalf("create %+v: no error", req)
		}
	}

	sb, err := m.Create(ctx, CreateRequest{Owner: "p-1", Template: template.BaseName, Isolation: fake.ID,
		IdleTimeout: 10 * time.Minute, PausedRetention: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	t.Cleanup(func() { m.Kill(ctx, id, "test over") })
	if !sb.ExpiresAt.IsZero() || !sb.Lifecycle.AutoResume {
		t.Fatalf("an idle timeout alone: expires %v, auto-resume %v", sb.ExpiresAt, sb.Lifecycle.AutoResume)
	}
	m.reapExpired(ctx)
	m.reapLifetimes(ctx) // first look: active now
	advance(9 * time.Minute)
	m.reapLifetimes(ctx)
	if s := state(id); s != StateRunning {
		t.Fatalf("paused before its idle timeout: %s", s)
	}
	// A held terminal keeps it from idling.
	release := m.Hold(id)
	advance(time.Hour)
	m.reapLifetimes(ctx)
	if s := state(id); s != StateRunning {
		t.Fatalf("idle while held: %s", s)
	}
	release()
	advance(11 * time.Minute)
	m.reapLifetimes(ctx)
	if s := state(id); s != StatePaused || !saw(id+" idle_pause") {
		t.Fatalf("after the idle timeout: %s, events %v", s, events)
	}
	// A call wakes it.
	if out := coldSh(t, m, id, "echo awake"); out != "awake" {
		t.Fatalf("exec after idle pause: %q", out)
	}
	if s := state(id); s != StateRunning {
		t.Fatalf("after a call: %s", s)
	}
	got, _ := m.Get(ctx, id)
	if !got.ExpiresAt.IsZero() {
		t.Fatalf("a resume gave a countdown: %v", got.ExpiresAt)
	}
	// Paused past its retention: deleted, with an event.
	if _, err := m.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	advance(6 * 24 * time.Hour)
	m.reapLifetimes(ctx)
	if s := state(id); s != StatePaused {
		t.Fatalf("deleted before its retention: %s", s)
	}
	advance(2 * 24 * time.Hour)
	m.reapLifetimes(ctx)
	if s := state(id); s != StateStopped || !saw(id+" retention_delete") {
		t.Fatalf("after its retention: %s, events %v", s, events)
	}

	// Maximum lifetime, whatever the activity.
	sb2, err := m.Create(ctx, CreateRequest{Owner: "p-1", Template: template.BaseName, Isolation: fake.ID,
		IdleTimeout: time.Hour, OnIdle: "kill", MaxLifetime: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Kill(ctx, sb2.ID, "test over") })
	for range 3 {
		advance(50 * time.Minute)
		m.Touch(sb2.ID)
		m.reapLifetimes(ctx)
	}
	if s := state(sb2.ID); s != StateStopped || !saw(sb2.ID+" lifetime_kill") {
		t.Fatalf("past its maximum lifetime: %s, events %v", s, events)
	}
}
