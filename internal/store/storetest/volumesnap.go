package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// VolumeSnapshotOpener opens a fresh store that keeps volumes and their
// snapshots.
type VolumeSnapshotOpener func(t *testing.T) (store.VolumeStore, store.VolumeSnapshotStore)

// RunVolumeSnapshots runs the conformance tests of
// store.VolumeSnapshotStore.
func RunVolumeSnapshots(t *testing.T, open VolumeSnapshotOpener) {
	t.Run("CRUD", func(t *testing.T) { vs, ss := open(t); testVolumeSnapshotCRUD(t, vs, ss) })
}

func testVolumeSnapshotCRUD(t *testing.T, vs store.VolumeStore, ss store.VolumeSnapshotStore) {
	v := store.Volume{ID: "vol-1", Name: "data", Owner: "alice", SizeBytes: 64 << 20, CreatedAt: base}
	if err := vs.CreateVolume(ctx(t), v); err != nil {
		t.Fatal(err)
	}
	a := store.VolumeSnapshot{ID: "vsn-1", VolumeID: v.ID, Owner: "alice", Name: "one", SizeBytes: 64 << 20, StoredBytes: 1 << 20, CreatedAt: base}
	if err := ss.CreateVolumeSnapshot(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	dup := a
	dup.ID = "vsn-2"
	if err := ss.CreateVolumeSnapshot(ctx(t), dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same volume and name: %v, want ErrConflict", err)
	}
	dupID := a
	dupID.Name = "other"
	if err := ss.CreateVolumeSnapshot(ctx(t), dupID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same id: %v, want ErrConflict", err)
	}
	orphan := a
	orphan.ID, orphan.VolumeID = "vsn-3", "vol-nosuch"
	if err := ss.CreateVolumeSnapshot(ctx(t), orphan); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no such volume: %v, want ErrNotFound", err)
	}
	if err := ss.CreateVolumeSnapshot(ctx(t), store.VolumeSnapshot{ID: "vsn-4", VolumeID: v.ID, Owner: "alice", Name: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no size or time: %v, want ErrInvalid", err)
	}
	b := a
	b.ID, b.Name, b.CreatedAt = "vsn-5", "two", base.Add(time.Second)
	if err := ss.CreateVolumeSnapshot(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	got, err := ss.GetVolumeSnapshot(ctx(t), v.ID, "alice", "one")
	if err != nil || got != a {
		t.Fatalf("get: %+v %v, want %+v", got, err, a)
	}
	if _, err := ss.GetVolumeSnapshot(ctx(t), v.ID, "bob", "one"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another owner's name: %v, want ErrNotFound", err)
	}
	list, err := ss.ListVolumeSnapshots(ctx(t), v.ID)
	if err != nil || len(list) != 2 || list[0].ID != "vsn-1" || list[1].ID != "vsn-5" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := ss.DeleteVolumeSnapshot(ctx(t), "vsn-1"); err != nil {
		t.Fatal(err)
	}
	if err := ss.DeleteVolumeSnapshot(ctx(t), "vsn-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	// Deleting the volume deletes its snapshots.
	if err := vs.DeleteVolume(ctx(t), v.ID); err != nil {
		t.Fatal(err)
	}
	if list, err := ss.ListVolumeSnapshots(ctx(t), v.ID); err != nil || len(list) != 0 {
		t.Fatalf("snapshots of a deleted volume: %+v %v", list, err)
	}
	if err := ss.DeleteVolumeSnapshot(ctx(t), "vsn-5"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of a cascaded snapshot: %v, want ErrNotFound", err)
	}
}
