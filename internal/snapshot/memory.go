package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
)

// Memory images (opt-in, CreateWithMemory): on a backend that can
// (backend.SnapshotKeeper with Capabilities.Fork: gvisor) a snapshot also
// keeps an image of the running sandbox's memory, outside the template
// store, under the backend's kept-snapshot directory (the daemon's state
// directory; not purged at start). Its record holds the backend and the
// image's reference; deleting the snapshot deletes the image. A sandbox
// created from the snapshot on the image's backend is restored from it
// (internal/api); elsewhere it boots from the files.

// MemorySandboxes is what memory images need of the sandbox manager.
type MemorySandboxes interface {
	KeepMemory(ctx context.Context, id string) (string, backend.SnapshotRef, error)
	DropMemory(ctx context.Context, backendID string, ref backend.SnapshotRef) error
}

// memoryImage is a kept image: its backend and reference (JSON).
type memoryImage struct{ backend, ref string }

func (s *Service) keepMemory(ctx context.Context, sandboxID string) (memoryImage, error) {
	ms, ok := s.sbx.(MemorySandboxes)
	if !ok {
		return memoryImage{}, fmt.Errorf("%w: this daemon keeps no memory images", ErrUnsupported)
	}
	b, ref, err := ms.KeepMemory(ctx, sandboxID)
	if errors.Is(err, backend.ErrUnsupported) {
		return memoryImage{}, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return memoryImage{}, err
	}
	raw, err := json.Marshal(ref)
	if err != nil {
		ms.DropMemory(context.WithoutCancel(ctx), b, ref)
		return memoryImage{}, fmt.Errorf("memory snapshot reference: %w", err)
	}
	return memoryImage{backend: b, ref: string(raw)}, nil
}

// dropMemory removes a kept image (none: nothing); a failure is logged.
func (s *Service) dropMemory(m memoryImage) {
	if m.ref == "" {
		return
	}
	ms, ok := s.sbx.(MemorySandboxes)
	if !ok {
		return
	}
	ref, err := MemoryRef(store.Snapshot{MemoryBackend: m.backend, MemoryRef: m.ref})
	if err == nil {
		err = ms.DropMemory(context.Background(), m.backend, ref)
	}
	if err != nil {
		s.log.Warn("snapshot memory image: delete failed", "backend", m.backend, "err", err)
	}
}

// MemoryRef decodes a snapshot's memory image reference.
func MemoryRef(sn store.Snapshot) (backend.SnapshotRef, error) {
	var ref backend.SnapshotRef
	if err := json.Unmarshal([]byte(sn.MemoryRef), &ref); err != nil {
		return ref, fmt.Errorf("memory image of snapshot %s: %w", sn.ID, err)
	}
	return ref, nil
}
