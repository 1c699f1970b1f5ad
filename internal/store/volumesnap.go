package store

import (
	"context"
	"time"
)

// VolumeSnapshot is a point-in-time copy of a volume's files
// (internal/volume owns its image).
type VolumeSnapshot struct {
	ID       string `json:"id"`
	VolumeID string `json:"volume_id"`
	Owner    string `json:"owner"`
	Name     string `json:"name"` // unique per volume and owner
	// SizeBytes is the volume's size when the snapshot was taken;
	// StoredBytes what its copy occupies on the host's disk.
	SizeBytes   int64     `json:"size_bytes"`
	StoredBytes int64     `json:"stored_bytes"`
	CreatedAt   time.Time `json:"created_at"`
}

// VolumeSnapshotStore persists volume snapshots. Deleting a volume
// (VolumeStore.DeleteVolume) deletes its snapshots' records.
type VolumeSnapshotStore interface {
	// CreateVolumeSnapshot inserts a snapshot: ID, and (VolumeID, Owner,
	// Name), must be unique (ErrConflict), the volume must exist
	// (ErrNotFound).
	CreateVolumeSnapshot(ctx context.Context, s VolumeSnapshot) error
	// GetVolumeSnapshot returns owner's snapshot name of a volume, or
	// ErrNotFound.
	GetVolumeSnapshot(ctx context.Context, volumeID, owner, name string) (VolumeSnapshot, error)
	// ListVolumeSnapshots returns a volume's snapshots, oldest first.
	ListVolumeSnapshots(ctx context.Context, volumeID string) ([]VolumeSnapshot, error)
	// DeleteVolumeSnapshot removes a snapshot by ID (ErrNotFound if there
	// is none).
	DeleteVolumeSnapshot(ctx context.Context, id string) error
}
