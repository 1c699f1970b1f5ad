package store

import (
	"context"
	"time"
)

// Volume is a named persistent directory with a size quota, owned by a
// principal (internal/volume owns its meaning and its host image).
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"` // unique per owner
	Owner     string    `json:"owner"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// VolumeAttachment is a volume mounted into a sandbox.
type VolumeAttachment struct {
	VolumeID  string    `json:"volume_id"`
	SandboxID string    `json:"sandbox_id"`
	Path      string    `json:"path"`
	ReadOnly  bool      `json:"read_only"`
	CreatedAt time.Time `json:"created_at"`
}

// VolumeStore persists volumes and their attachments. An attachment is
// live while its sandbox's record is not terminal (stopped, failed, lost);
// only live attachments count anywhere below.
type VolumeStore interface {
	// CreateVolume inserts a volume; (Owner, Name) and ID must be unique
	// (ErrConflict otherwise).
	CreateVolume(ctx context.Context, v Volume) error
	// GetVolume returns a volume by ID, or ErrNotFound.
	GetVolume(ctx context.Context, id string) (Volume, error)
	// GetVolumeByName returns owner's volume called name, or ErrNotFound.
	GetVolumeByName(ctx context.Context, owner, name string) (Volume, error)
	// ListVolumes returns owner's volumes ("" for every owner's) by name.
	ListVolumes(ctx context.Context, owner string) ([]Volume, error)
	// SetVolumeSize records a new size (ErrNotFound if there is none).
	SetVolumeSize(ctx context.Context, id string, size int64) error
	// DeleteVolume removes a volume (ErrNotFound if there is none,
	// ErrConflict while a live attachment holds it).
	DeleteVolume(ctx context.Context, id string) error
	// AttachVolumes records all of atts (one sandbox) in one transaction,
	// or none: a volume mounted read-write may have no other live
	// attachment, and one mounted read-only no live read-write one
	// (ErrConflict); the volumes and the sandbox must exist (ErrNotFound).
	AttachVolumes(ctx context.Context, atts []VolumeAttachment) error
	// DetachVolumes removes every attachment of a sandbox (idempotent).
	DetachVolumes(ctx context.Context, sandboxID string) error
	// VolumeAttachments returns a volume's live attachments by sandbox ID.
	VolumeAttachments(ctx context.Context, volumeID string) ([]VolumeAttachment, error)
}
