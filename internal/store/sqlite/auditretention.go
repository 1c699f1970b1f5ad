package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.AuditRetentionStore = (*Store)(nil)

// GetAuditAnchor implements store.AuditRetentionStore.
func (s *Store) GetAuditAnchor(ctx context.Context) (store.AuditAnchor, error) {
	a, err := getAuditAnchor(ctx, s.reader)
	if err != nil {
		return store.AuditAnchor{}, fmt.Errorf("audit anchor: %w", err)
	}
	return a, nil
}

func getAuditAnchor(ctx context.Context, q queryRower) (store.AuditAnchor, error) {
	var a store.AuditAnchor
	var nodes string
	var at sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT size, hash, checkpoint_n, nodes, mac, pruned_at FROM audit_anchor WHERE id = 1`).
		Scan(&a.Size, &a.Hash, &a.CheckpointN, &nodes, &a.MAC, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuditAnchor{}, store.ErrNotFound
	}
	if err != nil {
		return store.AuditAnchor{}, err
	}
	if err := json.Unmarshal([]byte(nodes), &a.Nodes); err != nil {
		return store.AuditAnchor{}, fmt.Errorf("nodes: %w", err)
	}
	a.PrunedAt = fromNanos(at)
	return a, nil
}

// PruneAudit implements store.AuditRetentionStore.
func (s *Store) PruneAudit(ctx context.Context, a store.AuditAnchor) (int64, error) {
	if a.Size <= 0 || a.Hash == "" || a.CheckpointN <= 0 || a.MAC == "" || a.PrunedAt.IsZero() {
		return 0, fmt.Errorf("prune audit log: size, hash, checkpoint, mac and time are required: %w", store.ErrInvalid)
	}
	nodes, err := json.Marshal(a.Nodes)
	if err != nil {
		return 0, fmt.Errorf("prune audit log: %w", err)
	}
	var deleted int64
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		old, err := getAuditAnchor(ctx, tx)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case old.Size == a.Size && old.Hash == a.Hash && old.CheckpointN == a.CheckpointN:
			return nil // already done
		case old.Size >= a.Size:
			return fmt.Errorf("already pruned to %d: %w", old.Size, store.ErrConflict)
		}
		var cpSize int64
		err = tx.QueryRowContext(ctx, `SELECT size FROM audit_checkpoints WHERE n = ?`, a.CheckpointN).Scan(&cpSize)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && cpSize != a.Size) {
			return fmt.Errorf("no checkpoint %d of size %d: %w", a.CheckpointN, a.Size, store.ErrInvalid)
		}
		if err != nil {
			return err
		}
		var last sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM audit_events`).Scan(&last); err != nil {
			return err
		}
		if !last.Valid || last.Int64 <= a.Size {
			return fmt.Errorf("the newest event must stay: %w", store.ErrInvalid)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit_anchor (id, size, hash, checkpoint_n, nodes, mac, pruned_at)
			VALUES (1, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET size = excluded.size, hash = excluded.hash, checkpoint_n = excluded.checkpoint_n,
				nodes = excluded.nodes, mac = excluded.mac, pruned_at = excluded.pruned_at`,
			a.Size, a.Hash, a.CheckpointN, string(nodes), a.MAC, nanos(a.PrunedAt)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM audit_events WHERE seq <= ?`, a.Size)
		if err != nil {
			return err
		}
		deleted, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit log to %d: %w", a.Size, err)
	}
	return deleted, nil
}

var _ store.UsageRetentionStore = (*Store)(nil)

// PruneUsage implements store.UsageRetentionStore.
func (s *Store) PruneUsage(ctx context.Context, before time.Time) (llm, sandbox int64, err error) {
	before = before.UTC()
	day := before.Format("2006-01-02")
	// An hour row covers [hour, hour+1h): it goes once that ended.
	hour := before.Add(-time.Hour).Unix()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM llm_usage WHERE day < ?`, day)
		if err != nil {
			return err
		}
		llm, _ = res.RowsAffected()
		if res, err = tx.ExecContext(ctx, `DELETE FROM sandbox_usage WHERE hour <= ?`, hour); err != nil {
			return err
		}
		sandbox, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("prune usage rows: %w", err)
	}
	return llm, sandbox, nil
}
