package backend

import "context"

// SnapshotKeeper is implemented by Snapshotters whose snapshots can also be
// kept: KeepSnapshot is Snapshot writing an image that outlives the daemon
// (not purged at its start), for a named snapshot's memory (internal/
// snapshot). StartFrom and DeleteSnapshot take its refs as Snapshot's.
type SnapshotKeeper interface {
	KeepSnapshot(ctx context.Context, h Handle) (SnapshotRef, error)
}
