package sandbox

import (
	"context"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// Reading is one sandbox's resource counters at a moment, for the usage
// meter (internal/usage): its backend's (the cgroup's CPU time and memory
// charge, the disk its writable layer holds) and its network link's.
type Reading struct {
	ID       string
	Owner    string // principal ID
	Template string
	// State is the record's state when read: running or paused (stopping
	// for a sandbox's final reading).
	State State
	At    time.Time
	// Started is when the sandbox started running (zero if unknown).
	Started time.Time
	// Usage is the backend's reading; HasUsage is false when the backend
	// could not give one (a cold-paused or checkpointed sandbox holds no
	// processes).
	Usage    backend.Usage
	HasUsage bool
	// Net is the network link's counters since it was attached; HasNet is
	// false without a link.
	Net    network.Stats
	HasNet bool
}

// UsageHook hears of a sandbox's counters when they are about to go (the
// usage meter). Its methods must not block for long.
type UsageHook interface {
	// Observe takes a reading made by the manager itself: before a cold
	// pause ends the sandbox's processes (the counters may start again from
	// zero on resume), and, final, before the backend deletes a sandbox
	// (its cgroup and link go with it).
	Observe(r Reading, final bool)
	// Changed says a sandbox was paused or resumed: a reading now splits
	// its time by state exactly.
	Changed(id string)
}

// readTimeout bounds one sandbox's backend reading.
const readTimeout = 2 * time.Second

// Readings reads every running or paused sandbox this daemon holds.
func (m *Manager) Readings(ctx context.Context) ([]Reading, error) {
	var out []Reading
	f := store.SandboxFilter{States: liveUsageStates, Limit: store.MaxPageSize}
	for {
		page, next, err := m.st.ListSandboxes(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			if _, ok := m.holds(sb.ID); ok {
				out = append(out, m.reading(ctx, sb))
			}
		}
		if next == "" || next == f.PageToken {
			return out, nil
		}
		f.PageToken = next
	}
}

// ReadingOf reads one running or paused sandbox.
func (m *Manager) ReadingOf(ctx context.Context, id string) (Reading, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return Reading{}, err
	}
	if s := State(sb.State); s != StateRunning && s != StatePaused {
		return Reading{}, &StateError{ID: id, State: s, Want: "running or paused"}
	}
	if _, ok := m.holds(id); !ok {
		return Reading{}, &StateError{ID: id, State: State(sb.State), Want: "running or paused on this daemon"}
	}
	return m.reading(ctx, sb), nil
}

// holds reports whether the manager holds sandbox id (booted or not).
func (m *Manager) holds(id string) (live, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.sandboxes[id]
	if !ok {
		return live{}, false
	}
	return *l, true
}

func (m *Manager) reading(ctx context.Context, sb store.Sandbox) Reading {
	r := Reading{ID: sb.ID, Owner: sb.Owner, Template: sb.Template, State: State(sb.State), Started: sb.StartedAt}
	l, _ := m.holds(sb.ID)
	m.readInto(ctx, &r, l)
	return r
}

// readInto fills r's counters from l.
func (m *Manager) readInto(ctx context.Context, r *Reading, l live) {
	if l.booted() {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		u, err := l.b.Usage(rctx, l.h)
		cancel()
		if err == nil {
			r.Usage, r.HasUsage = u, true
		}
	}
	if l.link != nil {
		r.Net, r.HasNet = l.link.Stats(), true
	}
	r.At = time.Now().UTC()
}

// observeUsage hands the usage hook sandbox id's reading (see UsageHook).
func (m *Manager) observeUsage(ctx context.Context, id string, final bool) {
	if m.cfg.Usage == nil {
		return
	}
	l, ok := m.holds(id)
	if !ok {
		return
	}
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		sb = store.Sandbox{ID: id}
	}
	st := StateStopping
	if !final && err == nil {
		st = State(sb.State)
	}
	r := Reading{ID: id, Owner: sb.Owner, Template: sb.Template, Started: sb.StartedAt, State: st}
	m.readInto(ctx, &r, l)
	m.cfg.Usage.Observe(r, final)
}

// usageChanged tells the usage hook that sandbox id was paused or resumed.
func (m *Manager) usageChanged(id string, err error) {
	if m.cfg.Usage != nil && err == nil {
		m.cfg.Usage.Changed(id)
	}
}
