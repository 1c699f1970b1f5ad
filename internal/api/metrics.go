package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// metrics are the API's Prometheus metrics.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec   // route, code
	latency  *prometheus.HistogramVec // route
	created  *prometheus.CounterVec   // outcome
	ended    *prometheus.CounterVec   // state
	create   *prometheus.HistogramVec // outcome
	tmplOps  *prometheus.HistogramVec // op (import, build), outcome
	handler  http.Handler
}

func newMetrics(reg *prometheus.Registry, mgr *sandbox.Manager) (*metrics, error) {
	m := &metrics{
		reg: reg,
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
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m, nil
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
