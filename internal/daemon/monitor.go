package daemon

import (
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/monitor"
	"github.com/warden-sandbox/warden/internal/store"
)

// monitorTap builds the Agent Monitor (docs/monitor.md) and returns the
// audit writer the governed path's AuditLog appends through: w itself,
// tapped so that every audit event reaches the timeline. With the monitor
// disabled (or a store without a timeline) it returns w.
func (d *daemon) monitorTap(w govern.AuditWriter) govern.AuditWriter {
	cfg := d.cfg.Monitor
	ms, ok := d.st.(store.MonitorStore)
	if cfg.Disabled || !ok {
		return w
	}
	m, err := monitor.New(monitor.Config{Store: ms, Principals: d.st, Log: d.log.With("subsystem", "monitor"),
		ContentRetention: cfg.ContentRetention, Retention: cfg.Retention, NoLLMContent: cfg.NoLLMContent})
	if err != nil {
		d.log.Warn("agent monitor unavailable", "err", err)
		return w
	}
	d.mon = m
	return m.Tap(w)
}

// closeMonitor writes the timeline events still buffered.
func (d *daemon) closeMonitor() {
	if d.mon != nil {
		d.mon.Close()
	}
}
