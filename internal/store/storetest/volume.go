package storetest

import (
	"errors"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// VolumeOpener opens a fresh store that also keeps volumes.
type VolumeOpener func(t *testing.T) (store.Store, store.VolumeStore)

// RunVolumes runs the conformance tests of store.VolumeStore.
func RunVolumes(t *testing.T, open VolumeOpener) {
	for _, tt := range []struct {
		name string
		fn   func(t *testing.T, s store.Store, v store.VolumeStore)
	}{
		{"CRUD", testVolumeCRUD},
		{"Attach", testVolumeAttach},
	} {
		t.Run(tt.name, func(t *testing.T) { s, v := open(t); tt.fn(t, s, v) })
	}
}

func testVolumeCRUD(t *testing.T, _ store.Store, vs store.VolumeStore) {
	v := store.Volume{ID: "vol-1", Name: "data", Owner: "alice", SizeBytes: 64 << 20, CreatedAt: base}
	if err := vs.CreateVolume(ctx(t), v); err != nil {
		t.Fatal(err)
	}
	dup := v
	dup.ID = "vol-2"
	if err := vs.CreateVolume(ctx(t), dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same owner and name: %v, want ErrConflict", err)
	}
	other := dup
	other.Owner = "bob"
	if err := vs.CreateVolume(ctx(t), other); err != nil {
		t.Fatalf("another owner's volume of the same name: %v", err)
	}
	if err := vs.CreateVolume(ctx(t), store.Volume{ID: "vol-3", Name: "x", Owner: "alice", CreatedAt: base}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no size: %v, want ErrInvalid", err)
	}
	got, err := vs.GetVolumeByName(ctx(t), "alice", "data")
	if err != nil || got.ID != "vol-1" || got.SizeBytes != 64<<20 || !got.CreatedAt.Equal(base) {
		t.Fatalf("GetVolumeByName: %+v %v", got, err)
	}
	if _, err := vs.GetVolume(ctx(t), "vol-9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetVolume of none: %v", err)
	}
	if l, err := vs.ListVolumes(ctx(t), "alice"); err != nil || len(l) != 1 {
		t.Fatalf("ListVolumes(alice): %v %v", l, err)
	}
	if l, err := vs.ListVolumes(ctx(t), ""); err != nil || len(l) != 2 {
		t.Fatalf("ListVolumes(all): %v %v", l, err)
	}
	if err := vs.SetVolumeSize(ctx(t), "vol-1", 128<<20); err != nil {
		t.Fatal(err)
	}
	if got, _ := vs.GetVolume(ctx(t), "vol-1"); got.SizeBytes != 128<<20 {
		t.Fatalf("size after resize: %d", got.SizeBytes)
	}
	if err := vs.SetVolumeSize(ctx(t), "vol-9", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("resize of none: %v", err)
	}
	if err := vs.DeleteVolume(ctx(t), "vol-1"); err != nil {
		t.Fatal(err)
	}
	if err := vs.DeleteVolume(ctx(t), "vol-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func testVolumeAttach(t *testing.T, s store.Store, vs store.VolumeStore) {
	mustPrincipal(t, s, "alice")
	for _, id := range []string{"sb-1", "sb-2", "sb-3"} {
		mustCreate(t, s, newSandbox(id, "alice", base))
	}
	if err := vs.CreateVolume(ctx(t), store.Volume{ID: "vol-1", Name: "data", Owner: "alice", SizeBytes: 1 << 20, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	at := func(sb string, ro bool) []store.VolumeAttachment {
		return []store.VolumeAttachment{{VolumeID: "vol-1", SandboxID: sb, Path: "/data", ReadOnly: ro, CreatedAt: base}}
	}
	// Read-only by many.
	if err := vs.AttachVolumes(ctx(t), at("sb-1", true)); err != nil {
		t.Fatal(err)
	}
	if err := vs.AttachVolumes(ctx(t), at("sb-2", true)); err != nil {
		t.Fatal(err)
	}
	// Read-write refused while read-only mounts hold it.
	if err := vs.AttachVolumes(ctx(t), at("sb-3", false)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("read-write beside read-only: %v, want ErrConflict", err)
	}
	if l, err := vs.VolumeAttachments(ctx(t), "vol-1"); err != nil || len(l) != 2 || !l[0].ReadOnly {
		t.Fatalf("attachments: %+v %v", l, err)
	}
	if err := vs.DeleteVolume(ctx(t), "vol-1"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete while mounted: %v, want ErrConflict", err)
	}
	// A terminal sandbox's attachment no longer counts.
	if err := vs.DetachVolumes(ctx(t), "sb-1"); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"running", "stopping", "stopped"} {
		if _, err := s.UpdateSandbox(ctx(t), "sb-2", func(sb *store.Sandbox) error { sb.State = st; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := vs.AttachVolumes(ctx(t), at("sb-3", false)); err != nil {
		t.Fatalf("read-write once the others ended: %v", err)
	}
	// Read-write is exclusive.
	if err := vs.AttachVolumes(ctx(t), at("sb-1", true)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("read-only beside read-write: %v, want ErrConflict", err)
	}
	// All or nothing: an unknown volume undoes the whole set.
	both := append(at("sb-1", true), store.VolumeAttachment{VolumeID: "vol-9", SandboxID: "sb-1", Path: "/x", CreatedAt: base})
	if err := vs.DetachVolumes(ctx(t), "sb-3"); err != nil {
		t.Fatal(err)
	}
	if err := vs.AttachVolumes(ctx(t), both); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown volume: %v, want ErrNotFound", err)
	}
	if l, _ := vs.VolumeAttachments(ctx(t), "vol-1"); len(l) != 0 {
		t.Fatalf("a failed attach left %+v", l)
	}
	if err := vs.DeleteVolume(ctx(t), "vol-1"); err != nil {
		t.Fatalf("delete once unmounted: %v", err)
	}
}
