package usage

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-sandbox/warden/internal/store"
)

// The meter's Prometheus series (docs/metrics.md) are counters since the
// daemon started, labelled sandbox, principal and agent. A live sandbox
// has series of its own; when it ends they are folded into its owner's
// series with sandbox="" (so a sum over sandbox never goes down). The
// number of series is bounded: live sandboxes (MaxSandboxes) plus owners,
// at most maxOwners of them; the rest share principal="_other".
const maxOwners = 1000

// OtherOwner is the principal label of owners past maxOwners.
const OtherOwner = "_other"

type ownerKey struct{ principal, agent string }

type sums struct {
	cpuNanos, memByteSeconds, out, in, runMillis, pausedMillis int64
}

func (s *sums) add(b store.SandboxUsage) {
	s.cpuNanos += b.CPUNanos
	s.memByteSeconds += b.MemoryByteSeconds
	s.out += b.EgressBytesOut
	s.in += b.EgressBytesIn
	s.runMillis += b.RunningMillis
	s.pausedMillis += b.PausedMillis
}

func (s *sums) addSums(o sums) {
	s.cpuNanos += o.cpuNanos
	s.memByteSeconds += o.memByteSeconds
	s.out += o.out
	s.in += o.in
	s.runMillis += o.runMillis
	s.pausedMillis += o.pausedMillis
}

type liveSums struct {
	owner ownerKey
	sums
}

type totals struct {
	mu      sync.Mutex
	owners  map[ownerKey]*sums
	sandbox map[string]*liveSums
}

func newTotals() *totals {
	return &totals{owners: map[ownerKey]*sums{}, sandbox: map[string]*liveSums{}}
}

func (t *totals) add(b store.SandboxUsage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.sandbox[b.SandboxID]
	if l == nil {
		l = &liveSums{owner: ownerKey{b.PrincipalID, b.Agent}}
		t.sandbox[b.SandboxID] = l
	}
	l.add(b)
}

// forget folds an ended sandbox's series into its owner's.
func (t *totals) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.sandbox[id]
	if l == nil {
		return
	}
	delete(t.sandbox, id)
	k := l.owner
	o := t.owners[k]
	if o == nil {
		if len(t.owners) >= maxOwners {
			k = ownerKey{OtherOwner, OtherOwner}
			o = t.owners[k]
		}
		if o == nil {
			o = &sums{}
			t.owners[k] = o
		}
	}
	o.addSums(l.sums)
}

var (
	usageLabels  = []string{"sandbox", "principal", "agent"}
	descCPU      = prometheus.NewDesc("warden_usage_cpu_seconds_total", "CPU time sandboxes used (their cgroups' counters), since the daemon started; sandbox=\"\" sums the owner's ended sandboxes.", usageLabels, nil)
	descMem      = prometheus.NewDesc("warden_usage_memory_gib_seconds_total", "Memory sandboxes held over time (GiB-seconds of their cgroups' charge), since the daemon started.", usageLabels, nil)
	descEgress   = prometheus.NewDesc("warden_usage_egress_bytes_total", "Payload bytes sandboxes sent to (out) and received from (in) the internet, since the daemon started.", append(usageLabels, "direction"), nil)
	descSeconds  = prometheus.NewDesc("warden_usage_sandbox_seconds_total", "Time sandboxes spent running or paused, since the daemon started.", append(usageLabels, "state"), nil)
	usageDescs   = []*prometheus.Desc{descCPU, descMem, descEgress, descSeconds}
	gib          = float64(1 << 30)
	counterValue = prometheus.CounterValue
)

var _ prometheus.Collector = (*Meter)(nil)

// Describe implements prometheus.Collector.
func (m *Meter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range usageDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Meter) Collect(ch chan<- prometheus.Metric) {
	t := m.tot
	t.mu.Lock()
	defer t.mu.Unlock()
	emit := func(sandbox string, k ownerKey, s sums) {
		lv := []string{sandbox, k.principal, k.agent}
		ch <- prometheus.MustNewConstMetric(descCPU, counterValue, float64(s.cpuNanos)/1e9, lv...)
		ch <- prometheus.MustNewConstMetric(descMem, counterValue, float64(s.memByteSeconds)/gib, lv...)
		ch <- prometheus.MustNewConstMetric(descEgress, counterValue, float64(s.out), append(lv, "out")...)
		ch <- prometheus.MustNewConstMetric(descEgress, counterValue, float64(s.in), append(lv, "in")...)
		ch <- prometheus.MustNewConstMetric(descSeconds, counterValue, float64(s.runMillis)/1e3, append(lv, "running")...)
		ch <- prometheus.MustNewConstMetric(descSeconds, counterValue, float64(s.pausedMillis)/1e3, append(lv, "paused")...)
	}
	for id, l := range t.sandbox {
		emit(id, l.owner, l.sums)
	}
	for k, s := range t.owners {
		emit("", k, *s)
	}
}
