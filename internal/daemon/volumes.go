package daemon

import (
	"context"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/volume"
)

// VolumesDir holds the persistent volumes' images and host mount points,
// under the state directory.
const VolumesDir = "volumes"

// buildVolumes opens the persistent volumes (internal/volume) and gives
// them to the sandbox manager. A host that cannot make them (no loop
// devices, no e2fsprogs) runs without: the volume routes answer 503 and a
// create asking for volumes is refused.
func (d *daemon) buildVolumes() {
	vs, ok := d.st.(store.VolumeStore)
	if !ok {
		d.log.Warn("volumes unavailable: the store keeps no volumes")
		return
	}
	m, err := volume.New(volume.Config{Dir: filepath.Join(d.cfg.StateDir, VolumesDir), UID: template.UserID, GID: template.UserID, Log: d.log}, vs)
	if err != nil {
		d.log.Warn("volumes unavailable", "err", err)
		return
	}
	d.vols = m
	d.mgr.SetVolumes(m)
}

// reconcileVolumes, once sandboxes are recovered, mounts on the host the
// volumes live sandboxes use and unmounts the others.
func (d *daemon) reconcileVolumes(ctx context.Context) {
	if d.vols == nil {
		return
	}
	if err := d.vols.Reconcile(ctx); err != nil {
		d.log.Error("reconcile volumes", "err", err)
	}
}
