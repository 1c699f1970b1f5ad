// Package usage is the sandbox usage meter: it reads every live sandbox's
// counters (its cgroup's CPU time and memory charge, its writable layer's
// disk, its network link's egress bytes) every few seconds and when a
// sandbox is paused, resumed or ends, and adds what each used to hourly
// rows in the store (store.SandboxUsageStore), attributed to the sandbox's
// owner principal and, when that is an agent principal, its agent name.
// The last reading of each sandbox is stored with the rows, in one
// transaction, so a restarted daemon goes on from it without counting
// anything twice; a sandbox's final reading is taken before its cgroup is
// removed (sandbox.UsageHook). docs/usage.md describes the figures.
package usage

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// DefaultInterval is how often every live sandbox is read.
const DefaultInterval = 5 * time.Second

// Source reads sandboxes (*sandbox.Manager).
type Source interface {
	Readings(ctx context.Context) ([]sandbox.Reading, error)
	ReadingOf(ctx context.Context, id string) (sandbox.Reading, error)
	Get(ctx context.Context, id string) (store.Sandbox, error)
}

// Principals looks up sandbox owners (store.Store).
type Principals interface {
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
}

// Config configures a Meter.
type Config struct {
	Store      store.SandboxUsageStore
	Principals Principals
	Interval   time.Duration // DefaultInterval when zero
	Log        *slog.Logger
}

// Meter meters sandboxes. It implements sandbox.UsageHook; Run reads
// them periodically.
type Meter struct {
	cfg Config
	src Source // set by Run

	changed chan string

	mu     sync.Mutex                    // serialises readings and their records
	last   map[string]store.SandboxMeter // by sandbox
	ended  map[string]time.Time          // recently ended sandboxes: late readings are dropped
	agents map[string]string             // principal -> agent name ("" for users)
	tot    *totals                       // Prometheus counters (metrics.go)
}

var _ sandbox.UsageHook = (*Meter)(nil)

// New builds a meter and loads the last readings of the store.
func New(ctx context.Context, cfg Config) (*Meter, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := &Meter{cfg: cfg, changed: make(chan string, 64), last: map[string]store.SandboxMeter{},
		ended: map[string]time.Time{}, agents: map[string]string{}, tot: newTotals()}
	meters, err := cfg.Store.ListSandboxMeters(ctx)
	if err != nil {
		return nil, err
	}
	for _, sm := range meters {
		// A sandbox's network link lives in the daemon: a restarted one
		// gives it a new link that counts from zero. Its cgroup's
		// counters kept counting.
		sm.EgressBytesOut, sm.EgressBytesIn = 0, 0
		m.last[sm.SandboxID] = sm
	}
	return m, nil
}

// SetSource gives the meter the sandboxes to read (the manager is built
// with the meter as its hook, so after it).
func (m *Meter) SetSource(src Source) {
	m.mu.Lock()
	m.src = src
	m.mu.Unlock()
}

// Run reads every live sandbox each interval, and a paused or resumed one
// at once, until ctx ends; then it reads them all a last time.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	m.Tick(ctx)
	for {
		select {
		case <-ctx.Done():
			m.Tick(context.WithoutCancel(ctx))
			return
		case <-t.C:
			m.Tick(ctx)
		case id := <-m.changed:
			m.readOne(ctx, id)
		}
	}
}

// Tick reads every live sandbox and records what each used since its last
// reading; a sandbox the meter followed that has ended without a final
// reading (lost, failed) is let go.
func (m *Meter) Tick(ctx context.Context) {
	src := m.source()
	if src == nil {
		return
	}
	rs, err := src.Readings(ctx)
	if err != nil {
		m.cfg.Log.Warn("usage: read sandboxes", "err", err)
		return
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		seen[r.ID] = true
	}
	var gone []string
	m.mu.Lock()
	for id := range m.last {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	var ended []string
	for _, id := range gone {
		sb, err := src.Get(ctx, id)
		if errors.Is(err, sandbox.ErrNotFound) || (err == nil && sandbox.State(sb.State).Terminal()) {
			ended = append(ended, id)
		}
	}
	m.record(ctx, rs, ended)
}

func (m *Meter) source() Source {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.src
}

func (m *Meter) readOne(ctx context.Context, id string) {
	src := m.source()
	if src == nil {
		return
	}
	r, err := src.ReadingOf(ctx, id)
	if err != nil {
		return // it ended: its final reading was taken
	}
	m.record(ctx, []sandbox.Reading{r}, nil)
}

// Observe implements sandbox.UsageHook.
func (m *Meter) Observe(r sandbox.Reading, final bool) {
	var ended []string
	if final {
		ended = []string{r.ID}
	}
	m.record(context.Background(), []sandbox.Reading{r}, ended)
}

// Changed implements sandbox.UsageHook: the sandbox is read at once.
func (m *Meter) Changed(id string) {
	select {
	case m.changed <- id:
	default: // the next tick reads it
	}
}

// endedKeep is how long an ended sandbox's late readings are refused.
const endedKeep = 10 * time.Minute

// record adds what readings rs used to the store with the meters' next
// readings, and lets the sandboxes in ended go (after their reading in rs,
// if any). On a store error nothing changes: the next reading covers the
// interval again.
func (m *Meter) record(ctx context.Context, rs []sandbox.Reading, ended []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for id, t := range m.ended {
		if now.Sub(t) > endedKeep {
			delete(m.ended, id)
		}
	}
	var (
		buckets []store.SandboxUsage
		nexts   []store.SandboxMeter
	)
	isEnded := map[string]bool{}
	for _, id := range ended {
		isEnded[id] = true
	}
	for _, r := range rs {
		if _, gone := m.ended[r.ID]; gone {
			continue
		}
		prev, ok := m.last[r.ID]
		if !ok {
			principal, agent := m.ownerOf(ctx, r.Owner)
			prev = initial(r, principal, agent)
		}
		if r.At.Before(prev.At) { // read before the reading recorded last
			continue
		}
		d, next := advance(prev, r)
		buckets = append(buckets, split(d, next, prev.At, r.At)...)
		if !isEnded[r.ID] {
			nexts = append(nexts, next)
		}
	}
	if len(buckets) == 0 && len(nexts) == 0 && len(ended) == 0 {
		return
	}
	if err := m.cfg.Store.RecordSandboxUsage(ctx, buckets, nexts, ended); err != nil {
		m.cfg.Log.Error("usage: record sandbox usage", "err", err)
		return
	}
	for _, n := range nexts {
		m.last[n.SandboxID] = n
	}
	for _, b := range buckets {
		m.tot.add(b)
	}
	for _, id := range ended {
		delete(m.last, id)
		m.ended[id] = now
		m.tot.forget(id)
	}
}

// ownerOf is a sandbox owner's principal and agent name (the principal's
// name when it is an agent principal).
func (m *Meter) ownerOf(ctx context.Context, principal string) (string, string) {
	if a, ok := m.agents[principal]; ok {
		return principal, a
	}
	if m.cfg.Principals == nil || principal == "" {
		return principal, ""
	}
	p, err := m.cfg.Principals.GetPrincipal(ctx, principal)
	if err != nil {
		return principal, "" // not cached: asked again next time
	}
	a := ""
	if p.Kind == store.PrincipalAgent {
		a = p.Name
	}
	if len(m.agents) > 10000 {
		clear(m.agents)
	}
	m.agents[principal] = a
	return principal, a
}
