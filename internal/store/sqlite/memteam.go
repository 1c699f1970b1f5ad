package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.MemoryTeamStore = (*Store)(nil)

// ClaimMemoryTeam implements store.MemoryTeamStore.
func (s *Store) ClaimMemoryTeam(ctx context.Context, name, owner string, at time.Time) (string, error) {
	if name == "" || owner == "" || at.IsZero() {
		return "", fmt.Errorf("claim memory team: name, owner and time are required: %w", store.ErrInvalid)
	}
	var got string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO memory_teams (name, owner_id, created_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO NOTHING`, name, owner, nanos(at)); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT owner_id FROM memory_teams WHERE name = ?`, name).Scan(&got)
	})
	if err != nil {
		return "", fmt.Errorf("claim memory team %s: %w", name, err)
	}
	return got, nil
}

// GetMemoryTeam implements store.MemoryTeamStore.
func (s *Store) GetMemoryTeam(ctx context.Context, name string) (string, error) {
	var owner string
	err := s.reader.QueryRowContext(ctx, `SELECT owner_id FROM memory_teams WHERE name = ?`, name).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("memory team %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("memory team %s: %w", name, err)
	}
	return owner, nil
}
