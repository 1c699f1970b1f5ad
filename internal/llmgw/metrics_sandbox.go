package llmgw

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// sandboxMetrics are the LLM series by sandbox (docs/metrics.md): calls,
// tokens and cost of the calls made from a sandbox, through the gateway
// (the warden.internal route) or straight to a provider through the
// egress broker ("via"). They carry a "sandbox" label, so the daemon
// registers them with the API's per-sandbox collectors: the label is summed
// away unless metrics.per_sandbox_labels is set. When a sandbox ends its
// series are folded into sandbox="" (ForgetSandbox), so that counters never
// go down and ended sandboxes keep no series.
type sandboxMetrics struct {
	calls, tokens, cost *prometheus.Desc

	mu   sync.Mutex
	rows map[sandboxKey]*sandboxVal
}

type sandboxKey struct{ sandbox, provider, model, via string }

type sandboxVal struct{ calls, in, out, cost float64 }

func newSandboxMetrics() *sandboxMetrics {
	l := []string{"sandbox", "provider", "model", "via"}
	return &sandboxMetrics{
		calls: prometheus.NewDesc("warden_llm_sandbox_calls_total",
			"LLM calls made from sandboxes that reached the provider, by via (gateway, egress).", l, nil),
		tokens: prometheus.NewDesc("warden_llm_sandbox_tokens_total",
			"LLM tokens of the calls made from sandboxes, by direction (input, output).", append(l, "direction"), nil),
		cost: prometheus.NewDesc("warden_llm_sandbox_cost_dollars_total",
			"LLM cost of the calls made from sandboxes, in dollars.", l, nil),
		rows: map[sandboxKey]*sandboxVal{},
	}
}

func (m *sandboxMetrics) add(k sandboxKey, in, out, costMicros int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.rows[k]
	if v == nil {
		v = &sandboxVal{}
		m.rows[k] = v
	}
	v.calls++
	v.in += float64(in)
	v.out += float64(out)
	v.cost += float64(costMicros) / 1e6
}

// forget folds a sandbox's series into sandbox="".
func (m *sandboxMetrics) forget(sandbox string) {
	if sandbox == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.rows {
		if k.sandbox != sandbox {
			continue
		}
		delete(m.rows, k)
		k.sandbox = ""
		to := m.rows[k]
		if to == nil {
			to = &sandboxVal{}
			m.rows[k] = to
		}
		to.calls += v.calls
		to.in += v.in
		to.out += v.out
		to.cost += v.cost
	}
}

// Describe implements prometheus.Collector.
func (m *sandboxMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.calls
	ch <- m.tokens
	ch <- m.cost
}

// Collect implements prometheus.Collector.
func (m *sandboxMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.rows {
		l := []string{k.sandbox, k.provider, k.model, k.via}
		ch <- prometheus.MustNewConstMetric(m.calls, prometheus.CounterValue, v.calls, l...)
		ch <- prometheus.MustNewConstMetric(m.tokens, prometheus.CounterValue, v.in, append(l, "input")...)
		ch <- prometheus.MustNewConstMetric(m.tokens, prometheus.CounterValue, v.out, append(l, "output")...)
		ch <- prometheus.MustNewConstMetric(m.cost, prometheus.CounterValue, v.cost, l...)
	}
}

// SandboxCollector returns the series by sandbox, to register with the
// API's per-sandbox collectors (their sandbox label is summed away unless
// metrics.per_sandbox_labels).
func (g *Gateway) SandboxCollector() prometheus.Collector { return g.sbMetrics }

// ForgetSandbox folds an ended sandbox's series into sandbox="".
func (g *Gateway) ForgetSandbox(id string) { g.sbMetrics.forget(id) }

// observeSandbox adds a settled call made from a sandbox.
func (g *Gateway) observeSandbox(c *call, via string, in, out, cost int64) {
	if c.sandbox == "" {
		return
	}
	g.sbMetrics.add(sandboxKey{c.sandbox, c.prov.Name, c.model, via}, in, out, cost)
}
