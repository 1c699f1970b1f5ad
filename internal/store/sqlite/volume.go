package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.VolumeStore = (*Store)(nil)

const volumeColumns = `id, name, owner, size_bytes, created_at`

// liveAttachment restricts volume_attachments (as a) to sandboxes that are
// not terminal.
const liveAttachment = `EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = a.sandbox_id AND s.state NOT IN ('stopped', 'failed', 'lost'))`

func scanVolume(r scanner) (store.Volume, error) {
	var v store.Volume
	var created sql.NullInt64
	if err := r.Scan(&v.ID, &v.Name, &v.Owner, &v.SizeBytes, &created); err != nil {
		return v, err
	}
	v.CreatedAt = fromNanos(created)
	return v, nil
}

// CreateVolume implements store.VolumeStore.
func (s *Store) CreateVolume(ctx context.Context, v store.Volume) error {
	if v.ID == "" || v.Name == "" || v.Owner == "" || v.SizeBytes <= 0 || v.CreatedAt.IsZero() {
		return fmt.Errorf("create volume %s: id, name, owner, a positive size and created_at are required: %w", v.Name, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?, ?)`,
			v.ID, v.Name, v.Owner, v.SizeBytes, nanos(v.CreatedAt))
		if isUnique(err) {
			return fmt.Errorf("name or id in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	return nil
}

// GetVolume implements store.VolumeStore.
func (s *Store) GetVolume(ctx context.Context, id string) (store.Volume, error) {
	v, err := scanVolume(s.reader.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("volume %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("get volume %s: %w", id, err)
	}
	return v, nil
}

// GetVolumeByName implements store.VolumeStore.
func (s *Store) GetVolumeByName(ctx context.Context, owner, name string) (store.Volume, error) {
	v, err := scanVolume(s.reader.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE owner = ? AND name = ?`, owner, name))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("volume %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("get volume %s: %w", name, err)
	}
	return v, nil
}

// ListVolumes implements store.VolumeStore.
func (s *Store) ListVolumes(ctx context.Context, owner string) ([]store.Volume, error) {
	q, args := `SELECT `+volumeColumns+` FROM volumes ORDER BY name, owner`, []any(nil)
	if owner != "" {
		q, args = `SELECT `+volumeColumns+` FROM volumes WHERE owner = ? ORDER BY name`, []any{owner}
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out, err := collect(rows, scanVolume)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// SetVolumeSize implements store.VolumeStore.
func (s *Store) SetVolumeSize(ctx context.Context, id string, size int64) error {
	if size <= 0 {
		return fmt.Errorf("resize volume %s: size must be positive: %w", id, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE volumes SET size_bytes = ? WHERE id = ?`, size, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("resize volume %s: %w", id, err)
	}
	return nil
}

// DeleteVolume implements store.VolumeStore.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM volume_attachments a WHERE a.volume_id = ? AND `+liveAttachment, id).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("mounted by %d sandbox(es): %w", n, store.ErrConflict)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return nil
}

// AttachVolumes implements store.VolumeStore.
func (s *Store) AttachVolumes(ctx context.Context, atts []store.VolumeAttachment) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, at := range atts {
			var rw, ro int
			err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(a.read_only = 0), 0), coalesce(sum(a.read_only = 1), 0)
				FROM volume_attachments a WHERE a.volume_id = ? AND a.sandbox_id != ? AND `+liveAttachment, at.VolumeID, at.SandboxID).Scan(&rw, &ro)
			if err != nil {
				return err
			}
			switch {
			case rw > 0:
				return fmt.Errorf("volume %s is mounted read-write by another sandbox: %w", at.VolumeID, store.ErrConflict)
			case !at.ReadOnly && ro > 0:
				return fmt.Errorf("volume %s is mounted read-only by %d other sandbox(es); read-write needs it alone: %w", at.VolumeID, ro, store.ErrConflict)
			}
			ronly := 0
			if at.ReadOnly {
				ronly = 1
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO volume_attachments (volume_id, sandbox_id, path, read_only, created_at) VALUES (?, ?, ?, ?, ?)`,
				at.VolumeID, at.SandboxID, at.Path, ronly, nanos(at.CreatedAt))
			switch {
			case isForeignKey(err):
				return fmt.Errorf("volume %s or sandbox %s: %w", at.VolumeID, at.SandboxID, store.ErrNotFound)
			case isUnique(err):
				return fmt.Errorf("volume %s is mounted twice in sandbox %s: %w", at.VolumeID, at.SandboxID, store.ErrConflict)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("attach volumes: %w", err)
	}
	return nil
}

// DetachVolumes implements store.VolumeStore.
func (s *Store) DetachVolumes(ctx context.Context, sandboxID string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM volume_attachments WHERE sandbox_id = ?`, sandboxID)
		return err
	})
	if err != nil {
		return fmt.Errorf("detach volumes of %s: %w", sandboxID, err)
	}
	return nil
}

// VolumeAttachments implements store.VolumeStore.
func (s *Store) VolumeAttachments(ctx context.Context, volumeID string) ([]store.VolumeAttachment, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT a.volume_id, a.sandbox_id, a.path, a.read_only, a.created_at
		FROM volume_attachments a WHERE a.volume_id = ? AND `+liveAttachment+` ORDER BY a.sandbox_id`, volumeID)
	if err != nil {
		return nil, fmt.Errorf("volume %s attachments: %w", volumeID, err)
	}
	out, err := collect(rows, func(r scanner) (store.VolumeAttachment, error) {
		var at store.VolumeAttachment
		var ro int
		var created sql.NullInt64
		err := r.Scan(&at.VolumeID, &at.SandboxID, &at.Path, &ro, &created)
		at.ReadOnly, at.CreatedAt = ro == 1, fromNanos(created)
		return at, err
	})
	if err != nil {
		return nil, fmt.Errorf("volume %s attachments: %w", volumeID, err)
	}
	return out, nil
}
