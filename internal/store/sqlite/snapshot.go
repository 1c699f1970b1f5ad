package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.SnapshotStore = (*Store)(nil)

const snapshotColumns = `id, name, owner, sandbox_id, template, template_id, size_bytes, created_at, memory_ref, memory_backend`

func scanSnapshot(r scanner) (store.Snapshot, error) {
	var v store.Snapshot
	var created sql.NullInt64
	var memRef, memBackend sql.NullString
	if err := r.Scan(&v.ID, &v.Name, &v.Owner, &v.SandboxID, &v.Template, &v.TemplateID, &v.SizeBytes, &created, &memRef, &memBackend); err != nil {
		return v, err
	}
	v.MemoryRef, v.MemoryBackend = memRef.String, memBackend.String
	v.CreatedAt = fromNanos(created)
	return v, nil
}

// CreateSnapshot implements store.SnapshotStore.
func (s *Store) CreateSnapshot(ctx context.Context, v store.Snapshot) error {
	if v.ID == "" || v.Name == "" || v.Owner == "" || v.TemplateID == "" || v.SizeBytes < 0 || v.CreatedAt.IsZero() ||
		(v.MemoryRef == "") != (v.MemoryBackend == "") {
		return fmt.Errorf("create snapshot %s: id, name, owner, template_id and created_at are required: %w", v.Name, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			v.ID, v.Name, v.Owner, v.SandboxID, v.Template, v.TemplateID, v.SizeBytes, nanos(v.CreatedAt),
			sql.NullString{String: v.MemoryRef, Valid: v.MemoryRef != ""}, sql.NullString{String: v.MemoryBackend, Valid: v.MemoryBackend != ""})
		if isUnique(err) {
			return fmt.Errorf("name or id in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create snapshot %s: %w", v.Name, err)
	}
	return nil
}

// GetSnapshot implements store.SnapshotStore.
func (s *Store) GetSnapshot(ctx context.Context, id string) (store.Snapshot, error) {
	v, err := scanSnapshot(s.reader.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return v, nil
}

// GetSnapshotByName implements store.SnapshotStore.
func (s *Store) GetSnapshotByName(ctx context.Context, owner, name string) (store.Snapshot, error) {
	v, err := scanSnapshot(s.reader.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE owner = ? AND name = ?`, owner, name))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("snapshot %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("get snapshot %s: %w", name, err)
	}
	return v, nil
}

// ListSnapshots implements store.SnapshotStore.
func (s *Store) ListSnapshots(ctx context.Context, owner, sandboxID string) ([]store.Snapshot, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE (? = '' OR owner = ?) AND (? = '' OR sandbox_id = ?) ORDER BY created_at, id`
	rows, err := s.reader.QueryContext(ctx, q, owner, owner, sandboxID, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out, err := collect(rows, scanSnapshot)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// SnapshotsOfTemplate implements store.SnapshotStore.
func (s *Store) SnapshotsOfTemplate(ctx context.Context, templateID string) ([]store.Snapshot, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE template_id = ? ORDER BY created_at, id`, templateID)
	if err != nil {
		return nil, fmt.Errorf("snapshots of %s: %w", templateID, err)
	}
	out, err := collect(rows, scanSnapshot)
	if err != nil {
		return nil, fmt.Errorf("snapshots of %s: %w", templateID, err)
	}
	return out, nil
}

// DeleteSnapshot implements store.SnapshotStore.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes sb, snapshots sn
			WHERE sn.id = ? AND sb.template_id = sn.template_id AND sb.state NOT IN ('stopped', 'failed', 'lost')`, id).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d sandbox(es) run from it: %w", n, store.ErrConflict)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}
