package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
)

// Memory images of named snapshots (internal/snapshot, opt-in): a kept
// backend snapshot (backend.SnapshotKeeper, gvisor) of a running sandbox,
// and new sandboxes restored from one through the path a fork of one takes
// (restoreFork).

// ErrMemoryUnusable: a snapshot's memory image cannot start a sandbox here
// (its backend is not available, or its source's record or template is
// gone); the caller boots from the snapshot's files instead.
var ErrMemoryUnusable = errors.New("memory image unusable")

// KeepMemory writes a kept memory image of running sandbox id and returns
// its backend and reference. Backends that cannot: backend.ErrUnsupported
// naming the capability; a sandbox with volumes is refused as a fork is.
func (m *Manager) KeepMemory(ctx context.Context, id string) (string, backend.SnapshotRef, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return "", backend.SnapshotRef{}, err
	}
	l, err := m.liveOf(sb, StateRunning)
	if err != nil {
		return "", backend.SnapshotRef{}, err
	}
	k, ok := l.b.(backend.SnapshotKeeper)
	if _, sn := l.b.(backend.Snapshotter); !l.b.Capabilities().Fork || !ok || !sn {
		return "", backend.SnapshotRef{}, fmt.Errorf("%w: backend %s cannot snapshot a sandbox's memory (capability fork; gvisor can)",
			backend.ErrUnsupported, l.b.ID())
	}
	ref, err := k.KeepSnapshot(context.WithoutCancel(ctx), l.h)
	if err != nil {
		return "", backend.SnapshotRef{}, fmt.Errorf("memory snapshot of %s: %w", id, err)
	}
	return l.b.ID(), ref, nil
}

// DropMemory removes a memory image KeepMemory wrote.
func (m *Manager) DropMemory(ctx context.Context, backendID string, ref backend.SnapshotRef) error {
	b, ok := m.backend(backendID)
	if !ok {
		return fmt.Errorf("%w: backend %q is not available on this daemon", backend.ErrUnsupported, backendID)
	}
	sn, ok := b.(backend.Snapshotter)
	if !ok {
		return fmt.Errorf("%w: backend %s keeps no memory images", backend.ErrUnsupported, backendID)
	}
	return sn.DeleteSnapshot(context.WithoutCancel(ctx), ref)
}

// DefaultBackend is the ID of the backend a create without isolation uses.
func (m *Manager) DefaultBackend() string { return m.b.ID() }

// RestoreRequest asks for a sandbox restored from a snapshot's memory image.
type RestoreRequest struct {
	Owner    string
	Name     string
	Snapshot string // the snapshot's id (metadata snapshot=<id>)
	Source   string // the sandbox the image is of
	Backend  string
	Ref      backend.SnapshotRef
	Timeout  time.Duration // 0: the source's
	Metadata map[string]string
}

// RestoreMemory starts a sandbox from a kept memory image: it runs what the
// source ran at the snapshot, with the source's settings (template,
// limits, user, environment, network policy) and its own id. The image
// stays. ErrMemoryUnusable when the image cannot be used here.
func (m *Manager) RestoreMemory(ctx context.Context, req RestoreRequest) (store.Sandbox, error) {
	if req.Timeout != 0 {
		if err := m.CheckTimeout(req.Timeout); err != nil {
			return store.Sandbox{}, err
		}
	}
	if err := m.checkName(ctx, req.Owner, req.Name); err != nil {
		return store.Sandbox{}, err
	}
	b, ok := m.backend(req.Backend)
	sn, isSn := b.(backend.Snapshotter)
	if !ok || !isSn {
		return store.Sandbox{}, fmt.Errorf("%w: backend %q is not available", ErrMemoryUnusable, req.Backend)
	}
	src, err := m.Get(ctx, req.Source)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("%w: source sandbox %s: %w", ErrMemoryUnusable, req.Source, err)
	}
	if err := checkMetadata(req.Metadata, len(src.Metadata)+1); err != nil {
		return store.Sandbox{}, err
	}
	release := func() {}
	if p, ok := m.tmpl.(interface{ Pin() func() }); ok {
		release = p.Pin()
	}
	defer release()
	tm, err := m.forkTemplate(src)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("%w: %w", ErrMemoryUnusable, err)
	}
	id := NewID()
	if err := m.reserve(id); err != nil {
		return store.Sandbox{}, err
	}
	made := false
	defer func() {
		if !made {
			m.drop(id)
		}
	}()
	timeout := cmp.Or(req.Timeout, src.Lifecycle.Timeout, m.cfg.DefaultTimeout)
	sb, err := m.restoreFork(context.WithoutCancel(ctx), id, sn, b, req.Ref, src, tm,
		ForkRequest{Owner: req.Owner, Name: req.Name, Metadata: req.Metadata, fromSnapshot: req.Snapshot}, timeout)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("restore from snapshot %s: %w", req.Snapshot, err)
	}
	made = true
	return sb, nil
}
