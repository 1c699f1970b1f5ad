package gvisor

import (
	"context"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/backend"
)

var _ backend.SnapshotKeeper = (*Backend)(nil)

// KeepSnapshot implements backend.SnapshotKeeper: Snapshot, with the image
// under KeptSnapshotDir, which PurgeSnapshots leaves alone.
func (b *Backend) KeepSnapshot(ctx context.Context, h backend.Handle) (backend.SnapshotRef, error) {
	return b.snapshotIn(ctx, h, b.cfg.KeptSnapshotDir)
}

// ownSnapshotDir reports whether dir is one of this backend's snapshot
// images: a directory right under the fork snapshots' or the kept ones'.
func (b *Backend) ownSnapshotDir(dir string) bool {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return false
	}
	parent := filepath.Dir(dir)
	return parent == filepath.Join(b.cfg.RunDir, snapshotDir) || parent == filepath.Clean(b.cfg.KeptSnapshotDir)
}
