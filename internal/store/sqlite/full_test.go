package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestFullDiskIsErrFull fills the database (max_page_count stands for a
// full disk: SQLite answers SQLITE_FULL either way) and checks that the
// write fails with store.ErrFull, of kind Unavailable, found without
// reading the error's text.
func TestFullDiskIsErrFull(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if err := s.CreatePrincipal(ctx, store.Principal{ID: "pr-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := s.writer.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages+2)); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 1000)
	for i := range 1000 {
		err = s.CreateSandbox(ctx, store.Sandbox{ID: fmt.Sprintf("sb-%d", i), Owner: "pr-1", State: "running",
			CreatedAt: now, Metadata: map[string]string{"a": big, "b": big, "c": big}})
		if err != nil {
			break
		}
	}
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("writes into a full database: %v, want store.ErrFull", err)
	}
	if k, msg := errkind.Of(err); k != errkind.Unavailable || msg != store.ErrFull.Error() {
		t.Errorf("errkind.Of = %s %q", k, msg)
	}
}
