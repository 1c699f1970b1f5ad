package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

// TestColdLifecycle checks E2B's lifecycle around the filesystem-only
// pause on the fake backend: create refuses AutoPauseCold without
// AutoPause or with AutoResume; a sandbox created with it is paused
// without its memory at its timeout, and a call does not resume it (Wake);
// ResumeCold boots it, and boots a sandbox paused with its memory again on
// its files (its background process gone), and refuses a running one.
func TestColdLifecycle(t *testing.T) {
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "coldlc-")
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
	m := New(Config{Reap: 50 * time.Millisecond}, st, b, coldTemplate{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.Run(rctx)

	req := CreateRequest{Owner: "p-1", Template: template.BaseName, Isolation: fake.ID, Timeout: time.Minute}
	for name, r := range map[string]CreateRequest{
		"without auto pause": {AutoPauseCold: true},
		"with auto resume":   {AutoPause: true, AutoResume: true, AutoPauseCold: true},
	} {
		r.Owner, r.Template, r.Isolation, r.Timeout = req.Owner, req.Template, req.Isolation, req.Timeout
		if _, err := m.Create(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("create %s: %v, want ErrInvalid", name, err)
		}
	}

	// Paused without its memory at its timeout.
	r := req
	r.AutoPause, r.AutoPauseCold, r.Timeout = true, true, 2*time.Second
	sb, err := m.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Kill(ctx, sb.ID, "test over") })
	coldSh(t, m, sb.ID, "echo a > kept.txt")
	bg, err := strconv.Atoi(coldSh(t, m, sb.ID, "nohup sleep 600 >/dev/null 2>&1 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := m.Get(ctx, sb.ID)
		if err == nil && State(got.State) == StatePaused {
			if !got.Lifecycle.Cold {
				t.Fatal("paused at the timeout with its memory, want without")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused at its timeout: %+v, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The record says paused before the backend has stopped it.
	if err := m.waitStopped(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if alivePid(bg) {
		t.Fatalf("background process %d outlived the pause without memory", bg)
	}
	// AutoResume cannot be set with it, but a call must not boot a
	// cold-paused sandbox even if it were.
	if _, err := st.UpdateSandbox(ctx, sb.ID, func(s *store.Sandbox) error { s.Lifecycle.AutoResume = true; return nil }); err != nil {
		t.Fatal(err)
	}
	cur, _ := m.Get(ctx, sb.ID)
	if woken, err := m.Wake(ctx, cur); err != nil || State(woken.State) != StatePaused {
		t.Fatalf("wake of a cold-paused sandbox: %s, %v; want it left paused", woken.State, err)
	}
	if got, err := m.ResumeCold(ctx, sb.ID); err != nil || State(got.State) != StateRunning {
		t.Fatalf("resume cold of a cold-paused sandbox: %+v, %v", got, err)
	}
	if got := coldSh(t, m, sb.ID, "cat kept.txt"); got != "a" {
		t.Fatalf("kept file reads %q", got)
	}

	// Paused with its memory, then resumed with a cold boot.
	sb2, err := m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Kill(ctx, sb2.ID, "test over") })
	coldSh(t, m, sb2.ID, "echo b > kept.txt")
	bg2, err := strconv.Atoi(coldSh(t, m, sb2.ID, "nohup sleep 600 >/dev/null 2>&1 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := m.ResumeCold(ctx, sb2.ID); err != nil || State(got.State) != StateRunning || got.Lifecycle.Cold {
		t.Fatalf("resume cold of a sandbox paused with its memory: %+v, %v", got, err)
	}
	if alivePid(bg2) {
		t.Fatalf("background process %d outlived a resume without memory", bg2)
	}
	if got := coldSh(t, m, sb2.ID, "cat kept.txt"); got != "b" {
		t.Fatalf("kept file reads %q", got)
	}
	// A running sandbox is left as it is.
	bg3, err := strconv.Atoi(coldSh(t, m, sb2.ID, "nohup sleep 600 >/dev/null 2>&1 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ResumeCold(ctx, sb2.ID); err == nil {
		t.Fatal("resume cold of a running sandbox succeeded; want Resume's state error")
	}
	if !alivePid(bg3) {
		t.Fatal("resume cold of a running sandbox ended its process")
	}
}
