package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-sandbox/warden/internal/volume"
)

// Volumes in usage (docs/usage.md): a volume's disk is not a sandbox's
// writable layer, and it outlives sandboxes, so the meter's hourly rows do
// not hold it. GET /v1/usage?group_by=principal reports each principal's
// volumes and the bytes their filesystems use now; /metrics has
// warden_volume_used_bytes per volume.

// volumeUsage is one volume's use as measured.
type volumeUsage struct {
	name, owner string
	used        int64
}

// volumeUsageTTL is how long a measurement is reused: measuring a volume
// that no sandbox has attached mounts its image for a moment.
const volumeUsageTTL = 30 * time.Second

// volumeMeter measures the volumes' used bytes, reusing a measurement for
// volumeUsageTTL.
type volumeMeter struct {
	vols *volume.Manager

	mu   sync.Mutex
	at   time.Time
	last []volumeUsage
}

// measure returns every volume's use (a volume that cannot be measured
// now is left out).
func (m *volumeMeter) measure(ctx context.Context) ([]volumeUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != nil && time.Since(m.at) < volumeUsageTTL {
		return m.last, nil
	}
	vs, err := m.vols.List(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]volumeUsage, 0, len(vs))
	for _, v := range vs {
		info, err := m.vols.Inspect(ctx, v)
		if err != nil {
			continue // being deleted, or its image is busy: measured next time
		}
		out = append(out, volumeUsage{name: v.Name, owner: v.Owner, used: info.UsedBytes})
	}
	m.at, m.last = time.Now(), out
	return out, nil
}

// addVolumeUsage adds each principal's volumes (only principal's when not
// "") to the rows of a group_by=principal report.
func (s *Server) addVolumeUsage(ctx context.Context, principal string, row func(string) *usageRow) error {
	if s.volMeter == nil {
		return nil
	}
	vs, err := s.volMeter.measure(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if principal != "" && v.owner != principal {
			continue
		}
		g := row(v.owner)
		g.Volumes++
		g.VolumeBytes += v.used
	}
	return nil
}

var volumeUsedDesc = prometheus.NewDesc("warden_volume_used_bytes",
	"Bytes used in each persistent volume's filesystem (measured at most every 30 s).", []string{"volume", "principal"}, nil)

// Describe implements prometheus.Collector.
func (m *volumeMeter) Describe(ch chan<- *prometheus.Desc) { ch <- volumeUsedDesc }

// Collect implements prometheus.Collector.
func (m *volumeMeter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := m.measure(ctx)
	if err != nil {
		return
	}
	for _, v := range vs {
		ch <- prometheus.MustNewConstMetric(volumeUsedDesc, prometheus.GaugeValue, float64(v.used), v.name, v.owner)
	}
}

// registerVolumeUsage sets up the volume meter when volumes are kept.
func (s *Server) registerVolumeUsage() error {
	if s.cfg.Volumes == nil {
		return nil
	}
	s.volMeter = &volumeMeter{vols: s.cfg.Volumes}
	err := s.metrics.reg.Register(s.volMeter)
	if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil // another Server on the registry serves the series (tests)
	}
	return err
}
