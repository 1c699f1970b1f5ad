package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// metrics are the API's Prometheus metrics.
//
// GET /metrics needs the metrics:read scope: it is daemon-wide. Collectors
// whose series carry a sandbox id (RegisterCollector, the network's) go to
// a registry of their own, summed over the "sandbox" label at scrape time
// unless Config.PerSandboxLabels, so that a metrics reader does not learn
// every tenant's sandbox ids.
type metrics struct {
	reg      *prometheus.Registry
	labelled *prometheus.Registry     // collectors with a sandbox label
	requests *prometheus.CounterVec   // route, code
	latency  *prometheus.HistogramVec // route
	created  *prometheus.CounterVec   // outcome
	ended    *prometheus.CounterVec   // state
	create   *prometheus.HistogramVec // outcome
	tmplOps  *prometheus.HistogramVec // op (import, build), outcome
	handler  http.Handler
}

func newMetrics(reg *prometheus.Registry, mgr *sandbox.Manager, perSandbox bool) (*metrics, error) {
	m := &metrics{
		reg: reg, labelled: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern (streams count until they end).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_sandboxes_created_total",
			Help: "Sandbox creations by outcome (success or error).",
		}, []string{"outcome"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_sandboxes_ended_total",
			Help: "Sandboxes that reached a terminal state, by that state.",
		}, []string{"state"}),
		create: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_sandbox_create_duration_seconds",
			Help:    "Time to create and start a sandbox, by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
		tmplOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_template_operation_duration_seconds",
			Help:    "Duration of template imports and builds, by outcome.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"op", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.created, m.ended, m.create, m.tmplOps, &liveCollector{mgr: mgr}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register api metrics: %w", err)
		}
	}
	var labelled prometheus.Gatherer = m.labelled
	if !perSandbox {
		labelled = dropLabel{g: m.labelled, label: "sandbox"}
	}
	m.handler = promhttp.HandlerFor(prometheus.Gatherers{reg, labelled}, promhttp.HandlerOpts{})
	return m, nil
}

// dropLabel gathers g with one label removed, summing the series that then
// coincide (counters, gauges, untyped values and histograms; a summary's
// quantiles cannot be summed, so its series are dropped).
type dropLabel struct {
	g     prometheus.Gatherer
	label string
}

func (d dropLabel) Gather() ([]*dto.MetricFamily, error) {
	fams, err := d.g.Gather()
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		if f.GetType() == dto.MetricType_SUMMARY {
			continue
		}
		var keys []string
		sums := map[string]*dto.Metric{}
		for _, m := range f.GetMetric() {
			labels := slices.DeleteFunc(slices.Clone(m.GetLabel()), func(l *dto.LabelPair) bool { return l.GetName() == d.label })
			var kb strings.Builder
			for _, l := range labels {
				kb.WriteString(l.GetName() + "\xff" + l.GetValue() + "\xff")
			}
			k := kb.String()
			acc, ok := sums[k]
			if !ok {
				acc = proto.Clone(m).(*dto.Metric)
				acc.Label = labels
				acc.TimestampMs = nil
				sums[k] = acc
				keys = append(keys, k)
				continue
			}
			addMetric(acc, m)
		}
		nf := &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit}
		for _, k := range keys {
			nf.Metric = append(nf.Metric, sums[k])
		}
		out = append(out, nf)
	}
	return out, err
}

// addMetric adds m's value into acc (same type).
func addMetric(acc, m *dto.Metric) {
	switch {
	case acc.Counter != nil && m.Counter != nil:
		acc.Counter.Value = proto.Float64(acc.Counter.GetValue() + m.Counter.GetValue())
		acc.Counter.CreatedTimestamp = nil
		acc.Counter.Exemplar = nil
	case acc.Gauge != nil && m.Gauge != nil:
		acc.Gauge.Value = proto.Float64(acc.Gauge.GetValue() + m.Gauge.GetValue())
	case acc.Untyped != nil && m.Untyped != nil:
		acc.Untyped.Value = proto.Float64(acc.Untyped.GetValue() + m.Untyped.GetValue())
	case acc.Histogram != nil && m.Histogram != nil:
		h, o := acc.Histogram, m.Histogram
		h.SampleCount = proto.Uint64(h.GetSampleCount() + o.GetSampleCount())
		h.SampleSum = proto.Float64(h.GetSampleSum() + o.GetSampleSum())
		h.CreatedTimestamp = nil
		for i, b := range h.GetBucket() {
			if i < len(o.GetBucket()) && o.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				b.CumulativeCount = proto.Uint64(b.GetCumulativeCount() + o.Bucket[i].GetCumulativeCount())
			}
			b.Exemplar = nil
		}
	}
}

// liveCollector reports warden_sandboxes{state} for the live states, read
// from the store at scrape time, so sandboxes re-attached after a restart
// count too.
type liveCollector struct{ mgr *sandbox.Manager }

var liveDesc = prometheus.NewDesc("warden_sandboxes", "Sandboxes by state (live states only).", []string{"state"}, nil)

var liveStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopping}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) { ch <- liveDesc }

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, state := range liveStates {
		n, err := c.count(ctx, state)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(liveDesc, fmt.Errorf("count %s sandboxes: %w", state, err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(n), string(state))
	}
}

func (c *liveCollector) count(ctx context.Context, state sandbox.State) (int, error) {
	n, token := 0, ""
	for {
		page, next, err := c.mgr.List(ctx, store.SandboxFilter{States: []string{string(state)}, Limit: store.MaxPageSize, PageToken: token})
		if err != nil {
			return 0, err
		}
		n += len(page)
		if next == "" || next == token {
			return n, nil
		}
		token = next
	}
}

// templateOp records the duration of a template import or build that got
// as far as its work (requests refused up front are not counted).
func (m *metrics) templateOp(op string, start time.Time, err error) {
	outcome := "success"
	if err != nil {
		outcome = "error"
	}
	m.tmplOps.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
