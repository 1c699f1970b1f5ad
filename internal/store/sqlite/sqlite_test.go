package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/store/storetest"
)

func openTemp(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warden.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestOpenTwiceIsIdempotent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "warden.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	p := store.Principal{ID: "pr-1", Kind: store.PrincipalUser, Name: "admin", CreatedAt: time.Now()}
	if err := s.CreatePrincipal(ctx, p); err != nil {
		t.Fatal(err)
	}
	v1, err := s.SchemaVersion(ctx)
	if err != nil || v1 < 1 {
		t.Fatalf("SchemaVersion = %d, %v", v1, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		s, err = sqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		v, err := s.SchemaVersion(ctx)
		if err != nil || v != v1 {
			t.Errorf("reopen %d: SchemaVersion = %d, %v; want %d", i, v, err, v1)
		}
		if _, err := s.GetPrincipal(ctx, "pr-1"); err != nil {
			t.Errorf("reopen %d: data lost: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// Each migration is recorded exactly once.
	db := rawDB(t, path)
	var rows, distinct int
	if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != v1 || distinct != v1 {
		t.Errorf("schema_migrations has %d rows (%d distinct), want %d", rows, distinct, v1)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warden.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, path)
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err := sqlite.Open(t.Context(), path); err == nil {
		s.Close()
		t.Fatal("Open accepted a database with a newer schema")
	}
}

func TestFileModeAndPragmas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "warden.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Force a write so the WAL and shared-memory files exist.
	if err := s.CreatePrincipal(t.Context(), store.Principal{ID: "pr-1", Kind: store.PrincipalUser, Name: "a", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"warden.db", "warden.db-wal", "warden.db-shm"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("stat %s: %v", name, err)
			continue
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s mode = %o, want no group/other access", name, m)
		}
	}
	db := rawDB(t, path)
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
}

func TestRejectsMemoryPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file::memory:", "/tmp/x.db?mode=ro"} {
		if s, err := sqlite.Open(t.Context(), p); !errors.Is(err, store.ErrInvalid) {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open(%q): got %v, want ErrInvalid", p, err)
		}
	}
}

// rawDB opens the file directly, as an operator (or attacker) with access
// to the file would.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func BenchmarkCreateUpdateSandbox(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	if err := s.CreatePrincipal(ctx, store.Principal{ID: "pr-bench", Kind: store.PrincipalAgent, Name: "bench", CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("sb-%08d", i)
		sb := store.Sandbox{
			ID: id, Template: "base", State: "starting", Owner: "pr-bench", Backend: "native",
			CPUMillis: 1000, MemoryMB: 512, DiskMB: 1024,
			Env:      map[string]string{"A": "1"},
			Metadata: map[string]string{"team": "infra", "run": "bench"},
			User:     "user", Workdir: "/home/user", CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute),
		}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		if _, err := s.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
			if sb.State != "starting" {
				return store.ErrConflict
			}
			sb.State, sb.StartedAt = "running", now
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetSandbox(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	now := time.Now()
	if err := s.CreatePrincipal(ctx, store.Principal{ID: "pr-bench", Kind: store.PrincipalAgent, Name: "bench", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb-1", Owner: "pr-bench", State: "running", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.GetSandbox(ctx, "sb-1"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
