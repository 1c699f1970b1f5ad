package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// The manager's Prometheus metrics come in two collectors (Collectors):
//
//   - opsCollector: operation durations, OOM kills, the warm pool. Its
//     series carry no sandbox id.
//   - usageCollector: per-sandbox CPU, memory and OOM kills, labelled
//     sandbox, template and isolation, read from the backends at scrape
//     time. A reader that must not see sandbox ids can sum the "sandbox"
//     label away (template and isolation stay).

// opBuckets suit operations from a cgroup freeze (ms) to a gVisor
// checkpoint or a fork of a large sandbox (s).
var opBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Outcome label values.
const (
	outcomeSuccess = "success"
	outcomeError   = "error"
)

// metrics are the manager's own metrics (see opsCollector).
type metrics struct {
	ops    *prometheus.HistogramVec // op, isolation, outcome
	oom    *prometheus.CounterVec   // isolation
	hits   prometheus.Counter
	misses prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_sandbox_operation_duration_seconds",
			Help:    "Duration of sandbox operations (create, pause, resume, fork, kill) by backend and outcome.",
			Buckets: opBuckets,
		}, []string{"op", "isolation", "outcome"}),
		oom: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_oom_kills_total",
			Help: "OOM kills in sandboxes since the daemon started, by backend (each kill of a process by the OOM killer or gVisor's memory watchdog).",
		}, []string{"isolation"}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warden_pool_hits_total",
			Help: "Creates that could use the warm pool and got a pre-started sandbox from it.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warden_pool_misses_total",
			Help: "Creates that could use the warm pool but booted a sandbox (pool empty, or the pooled sandbox was unusable).",
		}),
	}
}

// observe records one operation's duration. Calls refused before any work
// (invalid, unknown sandbox or template) are not operations.
func (mt *metrics) observe(op, isolation string, start time.Time, err error) {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnknownTemplate) {
		return
	}
	outcome := outcomeSuccess
	if err != nil {
		outcome = outcomeError
	}
	mt.ops.WithLabelValues(op, isolation, outcome).Observe(time.Since(start).Seconds())
}

// Collectors returns the manager's Prometheus collectors: the first has no
// sandbox ids in its series, the second (per-sandbox usage) labels its
// series with "sandbox", "template" and "isolation".
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{&opsCollector{m: m}, &usageCollector{m: m}}
}

// isolationOf is the backend id of a sandbox the manager holds a handle for,
// else the default backend's.
func (m *Manager) isolationOf(id string) string {
	if l, ok := m.lookup(id); ok && l.h.Backend != "" {
		return l.h.Backend
	}
	return m.b.ID()
}

// Create creates and starts a sandbox and returns it running (or the error
// that made it fail; its record is then "failed").
func (m *Manager) Create(ctx context.Context, req CreateRequest) (store.Sandbox, error) {
	start := time.Now()
	ctx, span := startOp(ctx, "create", "") // trace.go
	sb, err := m.create(ctx, req)
	iso := sb.Backend
	if iso == "" {
		if iso = req.Isolation; iso == "" {
			iso = m.b.ID()
		}
	}
	m.met.observe("create", iso, start, err)
	traceTemplate(span, sb.Template, req.Template)
	endOp(span, sb.ID, iso, err)
	return sb, err
}

// Pause freezes a running sandbox on backends that can (native: the cgroup
// freezer; processes and memory stay resident, no CPU is used; gvisor: a
// checkpoint). A failed pause leaves the sandbox running.
func (m *Manager) Pause(ctx context.Context, id string) (store.Sandbox, error) {
	start, iso := time.Now(), m.isolationOf(id)
	ctx, span := startOp(ctx, "pause", id)
	sb, err := m.pause(ctx, id)
	m.met.observe("pause", iso, start, err)
	endOp(span, "", iso, err)
	m.usageChanged(id, err) // usage.go
	return sb, err
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, id string) (store.Sandbox, error) {
	m.Touch(id) // a resume is activity (lifetime.go)
	start, iso := time.Now(), m.isolationOf(id)
	ctx, span := startOp(ctx, "resume", id)
	sb, err := m.resume(ctx, id)
	m.met.observe("resume", iso, start, err)
	endOp(span, "", iso, err)
	m.usageChanged(id, err) // usage.go
	return sb, err
}

// Kill stops a sandbox and frees its resources. Killing a sandbox that has
// already ended is not an error.
func (m *Manager) Kill(ctx context.Context, id, reason string) error {
	start, iso := time.Now(), m.isolationOf(id)
	err := m.killByID(ctx, id, reason)
	m.met.observe("kill", iso, start, err)
	return err
}

// Fork makes n new sandboxes from a running sandbox's memory and files, on
// backends that can (gvisor); see fork. One observation per call, however
// many sandboxes it makes.
func (m *Manager) Fork(ctx context.Context, id string, req ForkRequest) ([]store.Sandbox, error) {
	start, iso := time.Now(), m.isolationOf(id)
	ctx, span := startOp(ctx, "fork", id)
	sbs, err := m.fork(ctx, id, req)
	m.met.observe("fork", iso, start, err)
	if span.IsRecording() {
		span.SetAttributes(attrCount.Int(len(sbs)))
	}
	endOp(span, "", iso, err)
	return sbs, err
}

// opsCollector collects the manager's metrics and the warm pool's size.
type opsCollector struct{ m *Manager }

var (
	poolSizeDesc   = prometheus.NewDesc("warden_pool_size", "Started sandboxes waiting in the warm pool.", []string{"template"}, nil)
	poolTargetDesc = prometheus.NewDesc("warden_pool_target", "How many sandboxes the warm pool keeps started (--pool-size).", []string{"template"}, nil)
)

func (c *opsCollector) Describe(ch chan<- *prometheus.Desc) {
	mt := c.m.met
	mt.ops.Describe(ch)
	mt.oom.Describe(ch)
	mt.hits.Describe(ch)
	mt.misses.Describe(ch)
	ch <- poolSizeDesc
	ch <- poolTargetDesc
}

func (c *opsCollector) Collect(ch chan<- prometheus.Metric) {
	mt := c.m.met
	mt.ops.Collect(ch)
	mt.oom.Collect(ch)
	mt.hits.Collect(ch)
	mt.misses.Collect(ch)
	ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(len(c.m.pool)), template.BaseName)
	ch <- prometheus.MustNewConstMetric(poolTargetDesc, prometheus.GaugeValue, float64(cap(c.m.pool)), template.BaseName)
}

// usageCollector reports each live sandbox's CPU, memory and OOM kills,
// read from its backend (cgroup files) when scraped. A scrape costs one
// store query and, per sandbox, a few small file reads, done usageWorkers
// at a time and cut off at usageTimeout; a sandbox whose usage cannot be
// read (it is ending, a gVisor sandbox paused to disk) is left out.
type usageCollector struct{ m *Manager }

const (
	usageWorkers = 4
	usageTimeout = 3 * time.Second
)

var (
	sbLabels      = []string{"sandbox", "template", "isolation"}
	sbCPUDesc     = prometheus.NewDesc("warden_sandbox_cpu_seconds_total", "CPU time used by a live sandbox's processes.", sbLabels, nil)
	sbMemDesc     = prometheus.NewDesc("warden_sandbox_memory_bytes", "Memory a live sandbox uses now (its cgroup's charge).", sbLabels, nil)
	sbMemPeakDesc = prometheus.NewDesc("warden_sandbox_memory_peak_bytes", "The most memory a live sandbox has used, where the backend knows it.", sbLabels, nil)
	sbOOMDesc     = prometheus.NewDesc("warden_sandbox_oom_kills_total", "OOM kills in a live sandbox.", sbLabels, nil)
)

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sbCPUDesc, sbMemDesc, sbMemPeakDesc, sbOOMDesc} {
		ch <- d
	}
}

// liveUsageStates are the states whose sandboxes hold host resources to
// report.
var liveUsageStates = []string{string(StateRunning), string(StatePaused)}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
	defer cancel()
	type target struct {
		sb store.Sandbox
		h  backend.Handle
	}
	var targets []target
	f := store.SandboxFilter{States: liveUsageStates, Limit: store.MaxPageSize}
	for {
		page, next, err := m.st.ListSandboxes(ctx, f)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(sbCPUDesc, err)
			return
		}
		m.mu.Lock()
		for _, sb := range page {
			if l, ok := m.sandboxes[sb.ID]; ok && l.booted() {
				targets = append(targets, target{sb, l.h})
			}
		}
		m.mu.Unlock()
		if next == "" || next == f.PageToken {
			break
		}
		f.PageToken = next
	}
	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, usageWorkers)
	)
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			b, ok := m.backend(t.h.Backend)
			if !ok {
				return
			}
			u, err := b.Usage(ctx, t.h)
			if err != nil {
				return
			}
			lv := []string{t.sb.ID, t.sb.Template, t.h.Backend}
			ch <- prometheus.MustNewConstMetric(sbCPUDesc, prometheus.CounterValue, float64(u.CPUNanos)/1e9, lv...)
			ch <- prometheus.MustNewConstMetric(sbMemDesc, prometheus.GaugeValue, float64(u.MemoryBytes), lv...)
			if u.MemoryPeak > 0 {
				ch <- prometheus.MustNewConstMetric(sbMemPeakDesc, prometheus.GaugeValue, float64(u.MemoryPeak), lv...)
			}
			if u.OOMEvents >= 0 {
				ch <- prometheus.MustNewConstMetric(sbOOMDesc, prometheus.CounterValue, float64(u.OOMEvents), lv...)
			}
		}()
	}
	wg.Wait()
}
