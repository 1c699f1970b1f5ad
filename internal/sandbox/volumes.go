package sandbox

import (
	"context"
	"fmt"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/volume"
)

// VolumeAttacher mounts persistent volumes into sandboxes
// (internal/volume's *Manager): Attach records a new sandbox's volumes
// (whose record exists) and mounts them on the host, returning the mounts
// for its spec; Detach forgets them once the sandbox has ended.
type VolumeAttacher interface {
	Attach(ctx context.Context, owner, sandboxID string, reqs []volume.Request) ([]backend.VolumeMount, error)
	Detach(ctx context.Context, sandboxID string)
}

// SetVolumes gives the manager its volumes, before it serves; without
// them a create that asks for volumes is refused.
func (m *Manager) SetVolumes(v VolumeAttacher) { m.vols = v }

// checkVolumes refuses early a create whose volumes cannot be mounted.
func (m *Manager) checkVolumes(b backend.Backend, req *CreateRequest) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	if m.vols == nil {
		return fmt.Errorf("%w: volumes: this daemon has no volume store", ErrInvalid)
	}
	if !b.Capabilities().Volumes {
		return fmt.Errorf("%w: volumes: backend %s cannot mount volumes (capability volumes is false); use one that can", ErrInvalid, b.ID())
	}
	if len(req.Volumes) > 16 {
		return fmt.Errorf("%w: volumes: at most 16", ErrInvalid)
	}
	paths := map[string]bool{}
	for _, v := range req.Volumes {
		if err := volume.ValidName(v.Name); err != nil {
			return fmt.Errorf("%w: volumes: %w", ErrInvalid, err)
		}
		if err := backend.ValidVolumeTarget(v.Path); err != nil {
			return fmt.Errorf("%w: volumes: %w", ErrInvalid, err)
		}
		if paths[v.Path] {
			return fmt.Errorf("%w: volumes: two at %s", ErrInvalid, v.Path)
		}
		paths[v.Path] = true
	}
	return nil
}

// attachVolumes attaches a new sandbox's volumes; on failure it records
// the sandbox failed.
func (m *Manager) attachVolumes(ctx context.Context, id string, req CreateRequest, spec *backend.Spec) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	mounts, err := m.vols.Attach(ctx, req.Owner, id, req.Volumes)
	if err != nil {
		m.finish(context.WithoutCancel(ctx), id, StateFailed, "volumes: "+err.Error())
		return fmt.Errorf("volumes: %w", err)
	}
	spec.Volumes = mounts
	return nil
}

// detachVolumes releases an ended sandbox's volumes.
func (m *Manager) detachVolumes(ctx context.Context, id string) {
	if m.vols != nil {
		m.vols.Detach(context.WithoutCancel(ctx), id)
	}
}
