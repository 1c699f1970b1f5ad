package llmgw

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's Prometheus series (docs/metrics.md), by
// principal, agent (the label, "" when none), provider and upstream model.
type metrics struct {
	calls  *prometheus.CounterVec
	tokens *prometheus.CounterVec
	cost   *prometheus.CounterVec
}

func newMetrics() *metrics {
	labels := []string{"principal", "agent", "provider", "model"}
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "warden_llm_calls_total",
			Help: "LLM calls through the gateway, by outcome (success, denied, error)."}, append(labels, "outcome")),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "warden_llm_tokens_total",
			Help: "LLM tokens from the providers' usage fields, by direction (input, output)."}, append(labels, "direction")),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "warden_llm_cost_dollars_total",
			Help: "LLM cost from the price table, in dollars."}, labels),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.tokens.Describe(ch)
	m.cost.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.tokens.Collect(ch)
	m.cost.Collect(ch)
}

// Collector returns the gateway's metrics, to register with the API's
// /metrics.
func (g *Gateway) Collector() prometheus.Collector { return g.metrics }

// countCall counts a call once, with its outcome (from audit).
func (g *Gateway) countCall(c *call) {
	g.metrics.calls.WithLabelValues(c.ident.Principal.ID, c.agent, c.prov.Name, c.model, c.outcome).Inc()
}

// observe adds a settled call's tokens and cost.
func (g *Gateway) observe(c *call, in, out, cost int64) {
	l := []string{c.ident.Principal.ID, c.agent, c.prov.Name, c.model}
	if in > 0 || out > 0 {
		g.metrics.tokens.WithLabelValues(append(l, "input")...).Add(float64(in))
		g.metrics.tokens.WithLabelValues(append(l, "output")...).Add(float64(out))
	}
	if cost > 0 {
		g.metrics.cost.WithLabelValues(l...).Add(float64(cost) / 1e6)
	}
}
