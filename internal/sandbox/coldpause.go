package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// A cold pause is E2B's filesystem-only pause (pause with keepMemory
// false): every process of the sandbox ends, its writable layer (its
// files) is kept, and a resume boots it again on that layer — a new
// kernel or PID 1, the template's start command run again, a new agent
// and a new network link, nothing of what ran before. The record is paused
// with Lifecycle.Cold set; backends do it through backend.Restarter
// (Capabilities.ColdRestart).
//
// A cold-paused sandbox keeps its place under Config.MaxSandboxes, as a
// paused sandbox with its memory does: it keeps host resources (its
// backend slot, cgroup and writable layer), and a resume must not fail for
// want of a place. It holds no process, memory or CPU.

// PauseCold pauses a running sandbox keeping only its files (see above).
// A backend that cannot (no Restarter, or a sandbox whose writable layer
// lives in memory) refuses with an error wrapping backend.ErrUnsupported
// and leaves the sandbox running.
func (m *Manager) PauseCold(ctx context.Context, id string) (store.Sandbox, error) {
	start, iso := time.Now(), m.isolationOf(id)
	ctx, span := startOp(ctx, "pause", id, attrCold.Bool(true)) // trace.go
	sb, err := m.pauseCold(ctx, id)
	m.met.observe("pause", iso, start, err)
	endOp(span, "", iso, err)
	return sb, err
}

func (m *Manager) pauseCold(ctx context.Context, id string) (store.Sandbox, error) {
	l, err := m.liveIn(ctx, id, StateRunning)
	if err != nil {
		return store.Sandbox{}, err
	}
	r, ok := l.b.(backend.Restarter)
	if !l.b.Capabilities().ColdRestart || !ok {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot pause a sandbox without its memory (a cold boot on resume)", backend.ErrUnsupported, l.b.ID())
	}
	ctx = context.WithoutCancel(ctx) // the record must end in a real state
	// A resume waits from before the record says paused until the backend
	// has stopped the sandbox.
	defer m.stopping(id)()
	// The record first: a daemon that restarts from here on finishes the
	// pause (recoverCold).
	if _, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if err := markPaused(s); err != nil {
			return err
		}
		s.Lifecycle.Cold = true
		return nil
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Sandbox{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return store.Sandbox{}, fmt.Errorf("pause: %w", err)
	}
	if !m.setCold(id, true) {
		return store.Sandbox{}, &StateError{ID: id, State: StateStopped, Want: string(StateRunning)}
	}
	m.observeUsage(ctx, id, false) // the counters may restart from zero (usage.go)
	h, err := r.StopKeep(ctx, l.h)
	if err != nil {
		return store.Sandbox{}, m.coldPauseFailed(ctx, id, l, err)
	}
	return m.keptCold(ctx, id, l.b, h)
}

// stopping marks sandbox id as being stopped by a cold pause until the
// function it returns is called: a resume waits for it (waitStopped).
func (m *Manager) stopping(id string) func() {
	done := make(chan struct{})
	m.mu.Lock()
	if l, ok := m.sandboxes[id]; ok {
		l.stopping = done
	}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if l, ok := m.sandboxes[id]; ok && l.stopping == done {
			l.stopping = nil
		}
		m.mu.Unlock()
		close(done)
	}
}

// waitStopped waits until no cold pause is stopping sandbox id (a resume
// asked for once the record says paused, as at an auto-pause, comes
// before the backend has stopped it).
func (m *Manager) waitStopped(ctx context.Context, id string) error {
	m.mu.Lock()
	var done chan struct{}
	if l, ok := m.sandboxes[id]; ok {
		done = l.stopping
	}
	m.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// coldPauseFailed undoes a cold pause whose StopKeep failed: a sandbox
// still running (the backend refused) is recorded running again; one
// whose processes are gone is killed. It returns the error to report.
func (m *Manager) coldPauseFailed(ctx context.Context, id string, l live, cause error) error {
	if st, err := l.b.Status(ctx, l.h); err == nil && st == backend.StateRunning {
		m.setCold(id, false)
		if _, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
			if State(s.State) != StatePaused || !s.Lifecycle.Cold {
				return nil
			}
			return markResumed(s)
		}); err != nil {
			m.log.Error("record sandbox running after a failed cold pause", "sandbox", id, "err", err)
		}
		return fmt.Errorf("pause: %w", cause)
	}
	m.kill(ctx, id, "cold pause failed: "+cause.Error())
	return fmt.Errorf("pause: %w (the sandbox was stopped)", cause)
}

// keptCold records that sandbox id's processes are gone and its files kept
// under handle h: its agent client and network link go.
func (m *Manager) keptCold(ctx context.Context, id string, b backend.Backend, h backend.Handle) (store.Sandbox, error) {
	if !m.detach(id, b, h) {
		return store.Sandbox{}, &StateError{ID: id, State: StateStopped, Want: string(StatePaused)} // killed meanwhile
	}
	raw, _ := json.Marshal(h)
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State) == StatePaused && s.Lifecycle.Cold {
			s.Handle = raw
		}
		return nil
	})
	if err != nil {
		return sb, fmt.Errorf("record pause: %w", err)
	}
	return sb, nil
}

// setCold marks sandbox id as stopped (or no longer) by a cold pause; it
// reports false when the manager no longer holds the sandbox.
func (m *Manager) setCold(id string, cold bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	if ok {
		l.cold = cold
	}
	return ok
}

// coldStopped reports whether a cold pause stopped sandbox id's processes.
func (m *Manager) coldStopped(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	return ok && l.cold
}

// detach gives sandbox id handle h of backend b and takes away its agent
// client and network link, closing them; false when the manager no longer
// holds the sandbox.
func (m *Manager) detach(id string, b backend.Backend, h backend.Handle) bool {
	m.mu.Lock()
	l, ok := m.sandboxes[id]
	var c *agentclient.Client
	var link *network.Link
	if ok {
		l.h, l.b = h, b
		c, l.client = l.client, nil
		link, l.link = l.link, nil
	}
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if link != nil {
		link.Close()
	}
	return ok
}

// resumeCold boots a cold-paused sandbox again on its kept files: a new
// agent, its network link, its template's start command; then it runs.
// On failure it stays paused (or, if it cannot be stopped again, is
// killed).
func (m *Manager) resumeCold(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	id := sb.ID
	if err := m.waitStopped(ctx, id); err != nil {
		return store.Sandbox{}, fmt.Errorf("resume: %w", err)
	}
	sb, err := m.Get(ctx, id) // as the pause left it
	if err != nil {
		return sb, err
	}
	if State(sb.State) != StatePaused || !sb.Lifecycle.Cold {
		return store.Sandbox{}, &StateError{ID: id, State: State(sb.State), Want: string(StatePaused)}
	}
	l, err := m.liveOf(sb, StatePaused)
	if err != nil {
		return store.Sandbox{}, err
	}
	r, ok := l.b.(backend.Restarter)
	if !l.b.Capabilities().ColdRestart || !ok || !l.cold {
		return store.Sandbox{}, fmt.Errorf("%w: sandbox %s was paused without its memory, which backend %s cannot resume", backend.ErrUnsupported, id, l.b.ID())
	}
	bctx := context.WithoutCancel(ctx) // boot even if the caller goes away
	// A kernel that reads its network devices at boot (gvisor) gets its
	// link before it boots, with the addresses the last kernel took from
	// the device; others get it once they run (below).
	netFirst := l.b.Capabilities().Network == backend.NetworkBeforeStart
	if netFirst {
		if err := m.attachNetwork(bctx, id, l.h, policyOf(sb)); err != nil {
			m.detach(id, l.b, l.h)
			return store.Sandbox{}, fmt.Errorf("resume: %w", err)
		}
		if nl, ok := m.lookup(id); ok && nl.link != nil {
			if err := nl.link.Readdress(); err != nil {
				m.detach(id, l.b, l.h)
				return store.Sandbox{}, fmt.Errorf("resume: network: %w", err)
			}
		}
	}
	h, err := r.Restart(bctx, l.h)
	if err != nil {
		m.detach(id, l.b, l.h) // the link, if it got one
		return store.Sandbox{}, fmt.Errorf("resume: %w", err)
	}
	fail := func(cause error) (store.Sandbox, error) {
		kh, err := r.StopKeep(bctx, h)
		if err != nil {
			m.kill(bctx, id, "cold resume failed: "+cause.Error())
			return store.Sandbox{}, fmt.Errorf("resume: %w (the sandbox was stopped: %v)", cause, err)
		}
		m.detach(id, l.b, kh)
		return store.Sandbox{}, fmt.Errorf("resume: %w", cause)
	}
	if !m.setHandle(id, l.b, h) {
		l.b.Delete(bctx, h)
		return store.Sandbox{}, &StateError{ID: id, State: StateStopped, Want: string(StatePaused)}
	}
	if !netFirst {
		if err := m.attachNetwork(bctx, id, h, policyOf(sb)); err != nil {
			return fail(err)
		}
	}
	if st := m.startOf(sb); st != nil {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return l.b.DialAgent(ctx, h) })
		m.setClient(id, c)
		if err := runStart(bctx, c, st); err != nil {
			return fail(err)
		}
	}
	raw, _ := json.Marshal(h)
	woken, err := m.st.UpdateSandbox(bctx, id, func(s *store.Sandbox) error {
		if State(s.State) != StatePaused || !s.Lifecycle.Cold {
			return &StateError{ID: id, State: State(s.State), Want: string(StatePaused)}
		}
		if err := markResumed(s); err != nil {
			return err
		}
		s.Handle = raw
		return nil
	})
	var se *StateError
	if errors.As(err, &se) {
		return woken, err // killed meanwhile: the kill deletes it
	}
	if err != nil {
		return fail(fmt.Errorf("record resume: %w", err))
	}
	m.setCold(id, false)
	go m.watch(id, h)
	return woken, nil
}

// startOf returns the start command of sb's template, if it has one: the
// version sb was created from (its layers are the ones it boots on).
func (m *Manager) startOf(sb store.Sandbox) *template.Start {
	for _, name := range []string{sb.TemplateID, sb.Template} {
		if name == "" {
			continue
		}
		if tm, err := m.tmpl.Get(name); err == nil && tm.ID == sb.TemplateID {
			return tm.Start
		}
	}
	if sb.TemplateID != "" {
		m.log.Warn("cold resume: template version gone; its start command is not run", "sandbox", sb.ID, "template", sb.TemplateID)
	}
	return nil
}

// recoverCold re-attaches, after a daemon restart, a sandbox recorded
// cold-paused: stopped with its files kept, it stays so; one the old daemon
// had not finished stopping is stopped now.
func (m *Manager) recoverCold(ctx context.Context, sb store.Sandbox, b backend.Backend, h backend.Handle) {
	m.setCold(sb.ID, true)
	m.forwardEvents(sb.ID, h)
	st, err := b.Status(ctx, h)
	if err == nil && st == backend.StateStopped {
		return
	}
	if r, ok := b.(backend.Restarter); ok && b.Capabilities().ColdRestart {
		kh, err := r.StopKeep(ctx, h)
		if err == nil {
			if _, err := m.keptCold(ctx, sb.ID, b, kh); err != nil {
				m.log.Error("finish a cold pause after restart", "sandbox", sb.ID, "err", err)
			}
			return
		}
		m.log.Error("finish a cold pause after restart", "sandbox", sb.ID, "err", err)
	}
	m.kill(ctx, sb.ID, fmt.Sprintf("daemon restart: the cold pause could not be finished (backend says %s: %v)", st, err))
}

// ResumeCold resumes a paused sandbox with a cold boot on its files,
// whatever its pause kept (E2B's connect or resume with memory false): a
// sandbox paused without its memory boots as Resume boots it; one paused
// with it is woken, stopped keeping only its files (PauseCold) and booted
// again, so that its memory does not live on (its processes run for the
// moment that takes). A backend that cannot restart cold refuses with an
// error wrapping backend.ErrUnsupported before anything changes; a sandbox
// in another state gets Resume's error.
func (m *Manager) ResumeCold(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if State(sb.State) != StatePaused || sb.Lifecycle.Cold {
		return m.Resume(ctx, id)
	}
	l, err := m.liveOf(sb, StatePaused)
	if err != nil {
		return store.Sandbox{}, err
	}
	if _, ok := l.b.(backend.Restarter); !ok || !l.b.Capabilities().ColdRestart {
		return store.Sandbox{}, fmt.Errorf("%w: backend %s cannot boot a sandbox again without its memory", backend.ErrUnsupported, l.b.ID())
	}
	if _, err := m.Resume(ctx, id); err != nil {
		return store.Sandbox{}, err
	}
	if _, err := m.PauseCold(ctx, id); err != nil {
		return store.Sandbox{}, fmt.Errorf("resume without memory: %w (the sandbox was resumed with its memory)", err)
	}
	return m.Resume(ctx, id)
}
