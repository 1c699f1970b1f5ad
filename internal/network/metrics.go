package network

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descBytes = prometheus.NewDesc("warden_network_bytes_total",
		"Payload bytes proxied for a sandbox, by direction (out: sandbox to internet).", []string{"sandbox", "direction"}, nil)
	descFlows = prometheus.NewDesc("warden_network_flows_total",
		"Allowed and connected flows of a sandbox, by protocol.", []string{"sandbox", "proto"}, nil)
	descActive = prometheus.NewDesc("warden_network_active_flows",
		"Open proxied flows of a sandbox.", []string{"sandbox"}, nil)
	descDenied = prometheus.NewDesc("warden_network_denied_total",
		"Flows and lookups of a sandbox refused by its network policy.", []string{"sandbox"}, nil)
	descDialErrors = prometheus.NewDesc("warden_network_dial_errors_total",
		"Allowed flows of a sandbox whose destination could not be reached.", []string{"sandbox"}, nil)
	descDNS = prometheus.NewDesc("warden_network_dns_queries_total",
		"Queries to Warden's DNS from a sandbox, by outcome (answered, denied).", []string{"sandbox", "outcome"}, nil)
	descDNSFiltered = prometheus.NewDesc("warden_network_dns_filtered_answers_total",
		"DNS answer records dropped for pointing at a denied address (rebinding).", []string{"sandbox"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBytes, descFlows, descActive, descDenied, descDialErrors, descDNS, descDNSFiltered} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one series set per attached
// sandbox, read at scrape time.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	links := make([]*Link, 0, len(m.links))
	for _, l := range m.links {
		links = append(links, l)
	}
	m.mu.Unlock()
	c := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, l := range links {
		s := &l.stats
		id := l.id
		c(descBytes, float64(s.bytesOut.Load()), id, "out")
		c(descBytes, float64(s.bytesIn.Load()), id, "in")
		c(descFlows, float64(s.tcp.Load()), id, "tcp")
		c(descFlows, float64(s.udp.Load()), id, "udp")
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(s.active.Load()), id)
		c(descDenied, float64(s.denied.Load()), id)
		c(descDialErrors, float64(s.dialErrors.Load()), id)
		q, d := s.dnsQueries.Load(), s.dnsDenied.Load()
		c(descDNS, float64(q-min(d, q)), id, "answered")
		c(descDNS, float64(d), id, "denied")
		c(descDNSFiltered, float64(s.dnsFiltered.Load()), id)
	}
}

var _ prometheus.Collector = (*Manager)(nil)
