package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
)

// Lifetimes (docs/persistence.md): beside the countdown of timeout_seconds
// (ExpiresAt), a sandbox may have
//
//   - an idle timeout: after that long without activity it is paused
//     (the default; it resumes when a call reaches it) or killed. Activity
//     is any call that reaches the sandbox's agent through the manager
//     (exec, files, code, the E2B proxy, each proxied port connection),
//     a resume, and, for as long as it is open, a held stream (a PTY:
//     Hold);
//   - a maximum lifetime from its creation, after which it is killed,
//     paused or not (0: unlimited);
//   - a retention for while it is paused: paused that long, it is
//     deleted.
//
// A sandbox created with an idle timeout and no timeout_seconds has no
// countdown at all: only idleness, its maximum lifetime and retention end
// it. Before the manager pauses or kills a sandbox for any of these (or
// for its timeout) it reports a lifecycle event (Config.OnEvent, which the
// daemon writes to the audit log as sandbox.<kind>).

// Lifetime limits.
const (
	MaxIdleTimeout = 30 * 24 * time.Hour
	MaxLifetimeCap = 366 * 24 * time.Hour
)

// activity is the manager's in-memory record of when each sandbox was
// last used; a restart counts as use.
type activity struct {
	mu    sync.Mutex
	last  map[string]time.Time
	holds map[string]int
}

func (a *activity) init() {
	if a.last == nil {
		a.last, a.holds = map[string]time.Time{}, map[string]int{}
	}
}

// Touch records activity of sandbox id now.
func (m *Manager) Touch(id string) {
	m.act.mu.Lock()
	m.act.init()
	m.act.last[id] = m.now()
	m.act.mu.Unlock()
}

// Hold counts sandbox id as active until the returned func is called (an
// open PTY or stream).
func (m *Manager) Hold(id string) (release func()) {
	m.act.mu.Lock()
	m.act.init()
	m.act.holds[id]++
	m.act.last[id] = m.now()
	m.act.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.act.mu.Lock()
			if m.act.holds[id]--; m.act.holds[id] <= 0 {
				delete(m.act.holds, id)
			}
			m.act.last[id] = m.now()
			m.act.mu.Unlock()
		})
	}
}

// idleSince returns when sandbox id was last active (now, first asked)
// and whether something holds it.
func (m *Manager) idleSince(id string, now time.Time) (time.Time, bool) {
	m.act.mu.Lock()
	defer m.act.mu.Unlock()
	m.act.init()
	t, ok := m.act.last[id]
	if !ok {
		m.act.last[id] = now
		t = now
	}
	return t, m.act.holds[id] > 0
}

func (m *Manager) forgetActivity(id string) {
	m.act.mu.Lock()
	delete(m.act.last, id)
	delete(m.act.holds, id)
	m.act.mu.Unlock()
}

func (m *Manager) now() time.Time {
	if m.clock != nil {
		return m.clock()
	}
	return time.Now()
}

// SetClock replaces the manager's clock for lifetimes (tests).
func (m *Manager) SetClock(now func() time.Time) { m.clock = now }

// lifecycleEvent reports that the manager is about to pause or kill a
// sandbox on its own (kind: idle_pause, idle_kill, lifetime_kill,
// retention_delete, timeout_pause, timeout_kill).
func (m *Manager) lifecycleEvent(id, kind, detail string) {
	m.log.Info("sandbox lifecycle", "sandbox", id, "event", kind, "detail", detail)
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(id, backend.Event{Kind: kind, Time: m.now().UTC(), Detail: detail})
	}
}

// checkLifetime validates a create request's lifetimes.
func (m *Manager) checkLifetime(b backend.Backend, req *CreateRequest) error {
	switch {
	case req.IdleTimeout < 0 || req.IdleTimeout > MaxIdleTimeout:
		return fmt.Errorf("%w: idle timeout must be between 1 second and %s", ErrInvalid, MaxIdleTimeout)
	case req.MaxLifetime < 0 || req.MaxLifetime > MaxLifetimeCap:
		return fmt.Errorf("%w: max lifetime must be between 1 second and %s (or unlimited)", ErrInvalid, MaxLifetimeCap)
	case req.PausedRetention < 0:
		return fmt.Errorf("%w: paused retention must not be negative", ErrInvalid)
	case req.OnIdle != "" && req.OnIdle != "pause" && req.OnIdle != "kill":
		return fmt.Errorf("%w: on_idle must be pause or kill", ErrInvalid)
	case req.OnIdle != "" && req.IdleTimeout == 0:
		return fmt.Errorf("%w: on_idle needs an idle timeout", ErrInvalid)
	}
	if req.IdleTimeout > 0 && req.OnIdle != "kill" {
		if !b.Capabilities().Pause {
			return fmt.Errorf("%w: backend %s cannot pause an idle sandbox; set on_idle to kill", ErrInvalid, b.ID())
		}
		req.AutoResume = true // a call wakes a sandbox paused for idleness
	}
	return nil
}

// reapLifetimes pauses or kills sandboxes idle past their idle timeout,
// kills those past their maximum lifetime and deletes those paused past
// their retention.
func (m *Manager) reapLifetimes(ctx context.Context) {
	now := m.now()
	for _, id := range m.liveIDs() {
		sb, err := m.st.GetSandbox(ctx, id)
		if err != nil {
			continue
		}
		lc := sb.Lifecycle
		st := State(sb.State)
		if st != StateRunning && st != StatePaused {
			continue
		}
		if lc.MaxLifetime > 0 && !now.Before(sb.CreatedAt.Add(lc.MaxLifetime)) {
			m.lifecycleEvent(id, "lifetime_kill", fmt.Sprintf("maximum lifetime %s reached", lc.MaxLifetime))
			m.kill(auto(ctx, "lifetime_kill"), id, "maximum lifetime reached")
			m.forgetActivity(id)
			continue
		}
		if st == StatePaused {
			ret := lc.PausedRetention
			if ret == 0 {
				ret = m.cfg.PausedRetention
			}
			if ret > 0 && !lc.PausedAt.IsZero() && !now.Before(lc.PausedAt.Add(ret)) {
				m.lifecycleEvent(id, "retention_delete", fmt.Sprintf("paused since %s, past its retention of %s", lc.PausedAt.Format(time.RFC3339), ret))
				m.kill(auto(ctx, "retention_delete"), id, "paused past its retention")
				m.forgetActivity(id)
			}
			continue
		}
		if lc.IdleTimeout <= 0 {
			continue
		}
		last, held := m.idleSince(id, now)
		if held || now.Sub(last) < lc.IdleTimeout {
			continue
		}
		if !lc.IdleKill {
			m.lifecycleEvent(id, "idle_pause", fmt.Sprintf("idle for %s", lc.IdleTimeout))
			if _, err := m.Pause(auto(ctx, "idle_pause"), id); err == nil {
				continue
			} else {
				m.log.Warn("pause of an idle sandbox failed; killing", "sandbox", id, "err", err)
			}
		}
		m.lifecycleEvent(id, "idle_kill", fmt.Sprintf("idle for %s", lc.IdleTimeout))
		m.kill(auto(ctx, "idle_kill"), id, "idle timeout")
		m.forgetActivity(id)
	}
}

// lifecycleOfLifetimes fills the lifetime fields of a stored lifecycle.
func lifecycleOfLifetimes(lc *store.Lifecycle, req CreateRequest) {
	lc.IdleTimeout, lc.MaxLifetime, lc.PausedRetention = req.IdleTimeout, req.MaxLifetime, req.PausedRetention
	lc.IdleKill = req.OnIdle == "kill"
}
