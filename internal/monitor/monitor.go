// Package monitor is the Agent Monitor: one activity timeline per agent,
// principal and sandbox (docs/monitor.md).
//
// The timeline is its own table (store.MonitorStore), not a view over the
// audit log: it has its own retention, and it holds content (prompts,
// tool input and output) that can be redacted without touching the
// audit hash chain. It is fed two ways:
//
//   - a tap on the governed path's audit log (Tap wraps the audit writer
//     that govern.AuditLog appends through): every audit event the doors
//     write (commands, file reads and writes, MCP tool calls, egress,
//     secret uses, LLM calls with their usage, rule and guardrail
//     decisions) is mirrored as a timeline event pointing at its audit
//     seq. The tap never blocks the call that wrote the event: events go
//     into a bounded buffer that one goroutine writes in batches (one
//     transaction each); when the buffer is full the event is dropped from
//     the timeline (it stays in the audit log) and counted;
//   - what agents that run elsewhere report (Record): the ingest endpoint
//     POST /v1/monitor/events and Claude Code's hooks (claudecode.go),
//     written before the call answers.
//
// Readers follow the timeline with Changed, which is closed whenever new
// events were stored.
package monitor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// Sources of timeline events.
const (
	SourceAudit  = "audit"
	SourceIngest = "ingest"
	SourceHook   = "hook"
)

// Defaults of Config.
const (
	DefaultContentRetention = 30 * 24 * time.Hour
	DefaultRetention        = 90 * 24 * time.Hour
	DefaultBuffer           = 16384
	// MaxContent bounds the content kept with one event; longer content
	// is cut (its digest is of the whole).
	MaxContent = 64 << 10
	// maxBatch bounds the tapped events written in one transaction.
	maxBatch = 1024
)

// Principals looks principals up (store.Store), to tell agents from
// humans.
type Principals interface {
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
}

// Config configures a Monitor.
type Config struct {
	Store      store.MonitorStore
	Principals Principals
	Log        *slog.Logger
	// ContentRetention is how long content (prompts, responses, tool
	// input and output) is kept; Retention how long events are. Zero
	// means the defaults; negative keeps forever.
	ContentRetention time.Duration
	Retention        time.Duration
	// Buffer is the number of tapped audit events that may wait to be
	// written (DefaultBuffer when 0).
	Buffer int
	Now    func() time.Time
	// NoLLMContent keeps only the digest of the LLM gateway's prompts and
	// responses, not their text (llm.go).
	NoLLMContent bool
}

// Monitor records and serves the timeline. Safe for concurrent use.
type Monitor struct {
	cfg Config
	st  store.MonitorStore
	log *slog.Logger
	now func() time.Time

	in      chan store.AuditEvent
	dropped atomic.Uint64
	// llm takes the LLM gateway's prompt and response events (llm.go).
	llm   chan store.MonitorEvent
	llmWG sync.WaitGroup

	kindMu sync.Mutex
	agent  map[string]bool // principal id -> is an agent

	chMu    sync.Mutex
	changed chan struct{}

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a Monitor and starts its writer and retention loops; Close
// stops them.
func New(cfg Config) (*Monitor, error) {
	if cfg.Store == nil {
		return nil, errors.New("new monitor: no store")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ContentRetention == 0 {
		cfg.ContentRetention = DefaultContentRetention
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	m := &Monitor{cfg: cfg, st: cfg.Store, log: cfg.Log, now: cfg.Now,
		in: make(chan store.AuditEvent, cfg.Buffer), agent: map[string]bool{},
		changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	m.startLLM()
	return m, nil
}

// Close writes the tapped events still buffered and stops the loops.
func (m *Monitor) Close() {
	m.once.Do(func() { close(m.stop) })
	<-m.done
	m.llmWG.Wait()
}

// Dropped is the number of tapped audit events left off the timeline
// because the buffer was full.
func (m *Monitor) Dropped() uint64 { return m.dropped.Load() }

// Changed returns a channel closed the next time events are stored.
func (m *Monitor) Changed() <-chan struct{} {
	m.chMu.Lock()
	defer m.chMu.Unlock()
	return m.changed
}

func (m *Monitor) notify() {
	m.chMu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.chMu.Unlock()
}

// Observe queues a stored audit event for the timeline without blocking.
func (m *Monitor) Observe(ev store.AuditEvent) {
	select {
	case m.in <- ev:
	default:
		if m.dropped.Add(1)%1000 == 1 {
			m.log.Warn("monitor buffer full: audit events left off the timeline (they stay in the audit log)",
				"dropped", m.dropped.Load())
		}
	}
}

// Record stores events an agent reported (IDs and times filled in when
// empty, content cut and digested) and returns them with their seqs.
func (m *Monitor) Record(ctx context.Context, evs []store.MonitorEvent) ([]store.MonitorEvent, error) {
	now := m.now().UTC()
	for i := range evs {
		e := &evs[i]
		if e.ID == "" {
			e.ID = NewID()
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		setContent(e, e.Content)
	}
	if err := m.st.AppendMonitorEvents(context.WithoutCancel(ctx), evs); err != nil {
		return nil, fmt.Errorf("record monitor events: %w", err)
	}
	m.notify()
	return evs, nil
}

// List returns timeline events (store.MonitorStore.ListMonitorEvents).
func (m *Monitor) List(ctx context.Context, f store.MonitorFilter) ([]store.MonitorEvent, error) {
	return m.st.ListMonitorEvents(ctx, f)
}

// Get returns one event.
func (m *Monitor) Get(ctx context.Context, id string) (store.MonitorEvent, error) {
	return m.st.GetMonitorEvent(ctx, id)
}

// Redact removes an event's content; the caller audits the redaction.
func (m *Monitor) Redact(ctx context.Context, id string) (store.MonitorEvent, error) {
	return m.st.RedactMonitorEvent(ctx, id, m.now().UTC())
}

// IsAgent reports whether a principal is an agent (cached; a lookup
// failure reports false and is not cached).
func (m *Monitor) IsAgent(ctx context.Context, id string) bool {
	if id == "" || id == "system" || m.cfg.Principals == nil {
		return false
	}
	m.kindMu.Lock()
	a, ok := m.agent[id]
	m.kindMu.Unlock()
	if ok {
		return a
	}
	p, err := m.cfg.Principals.GetPrincipal(ctx, id)
	if err != nil {
		return false
	}
	a = p.Kind == store.PrincipalAgent
	m.kindMu.Lock()
	m.agent[id] = a
	m.kindMu.Unlock()
	return a
}

// NewID returns a new event ID.
func NewID() string {
	var b [10]byte
	rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// setContent keeps content (cut to MaxContent) and its digest.
func setContent(e *store.MonitorEvent, content string) {
	if content == "" {
		e.Content = ""
		return
	}
	if e.ContentSHA256 == "" {
		sum := sha256.Sum256([]byte(content))
		e.ContentSHA256 = hex.EncodeToString(sum[:])
	}
	if len(content) > MaxContent {
		content = content[:MaxContent]
	}
	e.Content = content
}

// run writes tapped events in batches and applies retention hourly.
func (m *Monitor) run() {
	defer close(m.done)
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	m.retain()
	batch := make([]store.AuditEvent, 0, maxBatch)
	for {
		select {
		case ev := <-m.in:
			batch = append(batch[:0], ev)
		drain:
			for len(batch) < maxBatch {
				select {
				case ev := <-m.in:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			m.write(batch)
		case <-tick.C:
			m.retain()
		case <-m.stop:
			for {
				batch = batch[:0]
				for len(batch) < maxBatch {
					select {
					case ev := <-m.in:
						batch = append(batch, ev)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				m.write(batch)
			}
		}
	}
}

func (m *Monitor) write(batch []store.AuditEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs := make([]store.MonitorEvent, 0, len(batch))
	for _, a := range batch {
		evs = append(evs, m.fromAudit(ctx, a))
	}
	if err := m.st.AppendMonitorEvents(ctx, evs); err != nil {
		// A replayed seq (ErrConflict) or a store failure: write what can
		// be written one by one, so one bad event does not lose a batch.
		for i := range evs {
			if err := m.st.AppendMonitorEvents(ctx, evs[i:i+1]); err != nil && !errors.Is(err, store.ErrConflict) {
				m.log.Error("write monitor event", "audit_seq", evs[i].AuditSeq, "err", err)
			}
		}
	}
	m.notify()
}

func (m *Monitor) retain() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := m.now().UTC()
	if r := m.cfg.ContentRetention; r > 0 {
		if n, err := m.st.ExpireMonitorContent(ctx, now.Add(-r), now); err != nil {
			m.log.Error("expire monitor content", "err", err)
		} else if n > 0 {
			m.log.Info("monitor content past retention removed", "events", n)
		}
	}
	if r := m.cfg.Retention; r > 0 {
		if n, err := m.st.DeleteMonitorEvents(ctx, now.Add(-r)); err != nil {
			m.log.Error("delete monitor events", "err", err)
		} else if n > 0 {
			m.log.Info("monitor events past retention deleted", "events", n)
		}
	}
}
