package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.VolumeSnapshotStore = (*Store)(nil)

const volumeSnapshotColumns = `id, volume_id, owner, name, size_bytes, stored_bytes, created_at`

func scanVolumeSnapshot(r scanner) (store.VolumeSnapshot, error) {
	var v store.VolumeSnapshot
	var created sql.NullInt64
	if err := r.Scan(&v.ID, &v.VolumeID, &v.Owner, &v.Name, &v.SizeBytes, &v.StoredBytes, &created); err != nil {
		return v, err
	}
	v.CreatedAt = fromNanos(created)
	return v, nil
}

// CreateVolumeSnapshot implements store.VolumeSnapshotStore.
func (s *Store) CreateVolumeSnapshot(ctx context.Context, v store.VolumeSnapshot) error {
	if v.ID == "" || v.VolumeID == "" || v.Owner == "" || v.Name == "" || v.SizeBytes <= 0 || v.StoredBytes < 0 || v.CreatedAt.IsZero() {
		return fmt.Errorf("create volume snapshot %s: id, volume, owner, name, a positive size and created_at are required: %w", v.Name, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO volume_snapshots (`+volumeSnapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			v.ID, v.VolumeID, v.Owner, v.Name, v.SizeBytes, v.StoredBytes, nanos(v.CreatedAt))
		switch {
		case isUnique(err):
			return fmt.Errorf("name or id in use: %w", store.ErrConflict)
		case isForeignKey(err):
			return fmt.Errorf("volume %s: %w", v.VolumeID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create volume snapshot %s: %w", v.Name, err)
	}
	return nil
}

// GetVolumeSnapshot implements store.VolumeSnapshotStore.
func (s *Store) GetVolumeSnapshot(ctx context.Context, volumeID, owner, name string) (store.VolumeSnapshot, error) {
	v, err := scanVolumeSnapshot(s.reader.QueryRowContext(ctx, `SELECT `+volumeSnapshotColumns+` FROM volume_snapshots
		WHERE volume_id = ? AND owner = ? AND name = ?`, volumeID, owner, name))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("volume snapshot %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("get volume snapshot %s: %w", name, err)
	}
	return v, nil
}

// ListVolumeSnapshots implements store.VolumeSnapshotStore.
func (s *Store) ListVolumeSnapshots(ctx context.Context, volumeID string) ([]store.VolumeSnapshot, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+volumeSnapshotColumns+` FROM volume_snapshots
		WHERE volume_id = ? ORDER BY created_at, name`, volumeID)
	if err != nil {
		return nil, fmt.Errorf("list volume snapshots: %w", err)
	}
	out, err := collect(rows, scanVolumeSnapshot)
	if err != nil {
		return nil, fmt.Errorf("list volume snapshots: %w", err)
	}
	return out, nil
}

// DeleteVolumeSnapshot implements store.VolumeSnapshotStore.
func (s *Store) DeleteVolumeSnapshot(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM volume_snapshots WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete volume snapshot %s: %w", id, err)
	}
	return nil
}
