package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
)

// captureFS copies the writable layers of sandbox id, running or paused,
// through its backend (backend.FSCapturer; internal/snapshot makes
// snapshots of them). A running sandbox is frozen for the copy, so it sees
// one moment of the sandbox's files, and thawed after it, unless a call
// paused it meanwhile; it keeps running. A backend.PreCapturer copies
// first while it runs and is frozen only to copy what changed since; a
// backend.LiveCapturer freezes it itself. It returns the sandbox's record
// as it was when the copy began.
func (m *Manager) captureFS(ctx context.Context, id string, dir func(target string) (string, error)) (store.Sandbox, error) {
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
	// A LiveCapturer makes the running sandbox's copy consistent itself
	// (gvisor: its Pause would write the whole sandbox to disk).
	if _, live := fc.(backend.LiveCapturer); st == StateRunning && !live {
		p, ok := l.b.(backend.Pauser)
		if !ok || !l.b.Capabilities().Pause {
			return sb, fmt.Errorf("%w: backend %s cannot freeze a sandbox for a consistent copy", backend.ErrUnsupported, l.b.ID())
		}
		// freeze stops the sandbox's tasks; the function it returns lets
		// them run on (a pause that came meanwhile keeps it paused).
		freeze := func(ctx context.Context) (func(), error) {
			if err := p.Pause(ctx, l.h); err != nil {
				return nil, err
			}
			start := time.Now()
			return func() {
				m.log.Info("sandbox frozen for a filesystem copy", "sandbox", id, "frozen", time.Since(start))
				if cur, err := m.Get(context.WithoutCancel(ctx), id); err == nil && State(cur.State) == StatePaused {
					return
				}
				if err := p.Resume(context.WithoutCancel(ctx), l.h); err != nil {
					m.log.Error("thaw after a filesystem copy", "sandbox", id, "err", err)
				}
			}, nil
		}
		// A PreCapturer copies first while the sandbox runs, then, frozen,
		// only what changed: a shorter freeze.
		if pc, ok := fc.(backend.PreCapturer); ok {
			if err := pc.PreCaptureFS(ctx, l.h, dir, freeze); err != nil {
				return sb, err
			}
			return sb, nil
		}
		thaw, err := freeze(ctx)
		if err != nil {
			return sb, fmt.Errorf("freeze for the copy: %w", err)
		}
		defer thaw()
	}
	if err := fc.CaptureFS(ctx, l.h, dir); err != nil {
		return sb, err
	}
	return sb, nil
}
