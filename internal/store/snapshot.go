package store

import (
	"context"
	"time"
)

// Snapshot is a named capture of a sandbox's filesystem, owned by a
// principal (internal/snapshot owns its meaning). Its files are a template
// version in the template store (TemplateID, a manifest id) that no tag
// needs to name: sandboxes start from it as from any template.
type Snapshot struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"` // unique per owner
	Owner      string    `json:"owner"`
	SandboxID  string    `json:"sandbox_id"`  // the sandbox captured (it may have ended since)
	Template   string    `json:"template"`    // the template the captured sandbox booted from
	TemplateID string    `json:"template_id"` // the manifest the snapshot is
	SizeBytes  int64     `json:"size_bytes"`  // of the captured layers
	CreatedAt  time.Time `json:"created_at"`
	// MemoryBackend and MemoryRef: the memory image kept with the snapshot
	// (opt-in, backends that can: gvisor), the backend that wrote it and
	// its reference (JSON of backend.SnapshotRef); "" for none.
	MemoryBackend string `json:"memory_backend,omitempty"`
	MemoryRef     string `json:"memory_ref,omitempty"`
}

// SnapshotStore persists snapshots.
type SnapshotStore interface {
	// CreateSnapshot inserts a snapshot; (Owner, Name) and ID must be
	// unique (ErrConflict otherwise).
	CreateSnapshot(ctx context.Context, s Snapshot) error
	// GetSnapshot returns a snapshot by ID, or ErrNotFound.
	GetSnapshot(ctx context.Context, id string) (Snapshot, error)
	// GetSnapshotByName returns owner's snapshot called name, or ErrNotFound.
	GetSnapshotByName(ctx context.Context, owner, name string) (Snapshot, error)
	// ListSnapshots returns owner's snapshots ("" for every owner's),
	// only those of sandboxID when it is not "", oldest first.
	ListSnapshots(ctx context.Context, owner, sandboxID string) ([]Snapshot, error)
	// SnapshotsOfTemplate returns the snapshots whose files are template
	// version templateID.
	SnapshotsOfTemplate(ctx context.Context, templateID string) ([]Snapshot, error)
	// DeleteSnapshot removes a snapshot: ErrNotFound if there is none,
	// ErrConflict while a sandbox that is not terminal (stopped, failed,
	// lost) runs from its template version.
	DeleteSnapshot(ctx context.Context, id string) error
}
