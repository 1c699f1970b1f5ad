package daemon

import (
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
)

// buildSnapshots makes the filesystem snapshots service (internal/snapshot)
// over the template store and the sandbox manager; nil when the store
// keeps no snapshots (the routes then answer 503).
func (d *daemon) buildSnapshots() *snapshot.Service {
	ss, ok := d.st.(store.SnapshotStore)
	if !ok || d.tmpl == nil || d.mgr == nil {
		d.log.Warn("snapshots unavailable: the store keeps no snapshots")
		return nil
	}
	if d.snaps == nil {
		d.snaps = snapshot.New(ss, d.tmpl, d.mgr, d.log.With("component", "snapshot"))
	}
	return d.snaps
}
