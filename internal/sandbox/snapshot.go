package sandbox

import (
	"context"
	"fmt"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
)

// CaptureFS copies the writable layers of sandbox id, running or paused,
// through its backend (backend.FSCapturer; internal/snapshot makes
// snapshots of them). A running sandbox is frozen for the copy, so it sees
// one moment of the sandbox's files, and thawed after it, unless a call
// paused it meanwhile; it keeps running. It returns the sandbox's record
// as it was when the copy began.
func (m *Manager) CaptureFS(ctx context.Context, id string, dir func(target string) (string, error)) (store.Sandbox, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	st := State(sb.State)
	if st != StateRunning && st != StatePaused {
		return sb, &StateError{ID: id, State: st, Want: "running or paused"}
	}
	l, err := m.liveOf(sb, st)
	if err != nil {
		return sb, err
	}
	fc, ok := l.b.(backend.FSCapturer)
	if !ok {
		return sb, fmt.Errorf("%w: backend %s cannot copy a sandbox's files (native can)", backend.ErrUnsupported, l.b.ID())
	}
	if st == StateRunning {
		p, ok := l.b.(backend.Pauser)
		if !ok || !l.b.Capabilities().Pause {
			return sb, fmt.Errorf("%w: backend %s cannot freeze a sandbox for a consistent copy", backend.ErrUnsupported, l.b.ID())
		}
		if err := p.Pause(ctx, l.h); err != nil {
			return sb, fmt.Errorf("freeze for the copy: %w", err)
		}
		defer func() {
			// A pause that came while the copy ran keeps it paused.
			if cur, err := m.Get(context.WithoutCancel(ctx), id); err == nil && State(cur.State) == StatePaused {
				return
			}
			if err := p.Resume(context.WithoutCancel(ctx), l.h); err != nil {
				m.log.Error("thaw after a filesystem copy", "sandbox", id, "err", err)
			}
		}()
	}
	if err := fc.CaptureFS(ctx, l.h, dir); err != nil {
		return sb, err
	}
	return sb, nil
}
