package fake

import (
	"context"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
)

var _ backend.Restarter = (*Backend)(nil)

// StopKeep implements backend.Restarter: it kills the agent and every
// process under it and keeps the sandbox's directory (its files).
func (b *Backend) StopKeep(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	sb, st, err := b.running(h)
	if err != nil {
		return h, err
	}
	killTree(st.Pid)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := b.wait(wctx, sb, st); err != nil {
		return h, fmt.Errorf("stop %s: %w", h.ID, err)
	}
	if err := updateState(sb.dir, func(st *state) { *st = state{ID: st.ID, Kept: true} }); err != nil {
		return h, fmt.Errorf("stop %s: %w", h.ID, err)
	}
	b.mu.Lock()
	b.sbs[h.ID] = &sandbox{dir: sb.dir} // Start may run it again
	b.mu.Unlock()
	return h, nil
}

// Restart implements backend.Restarter: a new agent on the kept directory.
func (b *Backend) Restart(ctx context.Context, h backend.Handle) (backend.Handle, error) {
	sb, err := b.lookup(h)
	if err != nil {
		return h, err
	}
	st, err := readState(sb.dir)
	if err != nil {
		return h, err
	}
	if !st.Kept {
		return h, fmt.Errorf("restart %s: %w", h.ID, backend.ErrAlreadyStart)
	}
	if err := updateState(sb.dir, func(st *state) { st.Kept = false }); err != nil {
		return h, fmt.Errorf("restart %s: %w", h.ID, err)
	}
	started, err := b.Start(ctx, h)
	if err != nil {
		// Keep it stopped and restartable, as it was.
		b.Kill(context.WithoutCancel(ctx), h)
		updateState(sb.dir, func(st *state) { *st = state{ID: st.ID, Kept: true} })
		b.mu.Lock()
		b.sbs[h.ID] = &sandbox{dir: sb.dir}
		b.mu.Unlock()
		return h, fmt.Errorf("restart %s: %w", h.ID, err)
	}
	return started, nil
}
