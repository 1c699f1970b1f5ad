package storetest

import (
	"errors"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// SnapshotOpener opens a fresh store that also keeps snapshots.
type SnapshotOpener func(t *testing.T) (store.Store, store.SnapshotStore)

// RunSnapshots runs the conformance tests of store.SnapshotStore.
func RunSnapshots(t *testing.T, open SnapshotOpener) {
	t.Run("CRUD", func(t *testing.T) { s, v := open(t); testSnapshotCRUD(t, s, v) })
	t.Run("Memory", func(t *testing.T) { _, v := open(t); testSnapshotMemory(t, v) })
}

func testSnapshotCRUD(t *testing.T, s store.Store, ss store.SnapshotStore) {
	sn := store.Snapshot{ID: "snap-1", Name: "good", Owner: "alice", SandboxID: "sb-1", Template: "base",
		TemplateID: "sha256:aaaa", SizeBytes: 4096, CreatedAt: base}
	if err := ss.CreateSnapshot(ctx(t), sn); err != nil {
		t.Fatal(err)
	}
	dup := sn
	dup.ID = "snap-2"
	if err := ss.CreateSnapshot(ctx(t), dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same owner and name: %v, want ErrConflict", err)
	}
	other := dup
	other.Owner, other.SandboxID, other.TemplateID = "bob", "sb-2", "sha256:bbbb"
	if err := ss.CreateSnapshot(ctx(t), other); err != nil {
		t.Fatalf("another owner's snapshot of the same name: %v", err)
	}
	if err := ss.CreateSnapshot(ctx(t), store.Snapshot{ID: "snap-3", Name: "x", Owner: "alice", CreatedAt: base}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no template id: %v, want ErrInvalid", err)
	}
	got, err := ss.GetSnapshotByName(ctx(t), "alice", "good")
	if err != nil || got != sn {
		t.Fatalf("GetSnapshotByName: %+v %v, want %+v", got, err, sn)
	}
	if got, err := ss.GetSnapshot(ctx(t), "snap-2"); err != nil || got.Owner != "bob" {
		t.Fatalf("GetSnapshot: %+v %v", got, err)
	}
	if _, err := ss.GetSnapshot(ctx(t), "snap-9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshot of none: %v", err)
	}
	if _, err := ss.GetSnapshotByName(ctx(t), "bob", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshotByName of none: %v", err)
	}
	if l, err := ss.ListSnapshots(ctx(t), "alice", ""); err != nil || len(l) != 1 || l[0].ID != "snap-1" {
		t.Fatalf("ListSnapshots(alice): %v %v", l, err)
	}
	if l, err := ss.ListSnapshots(ctx(t), "", ""); err != nil || len(l) != 2 {
		t.Fatalf("ListSnapshots(all): %v %v", l, err)
	}
	if l, err := ss.ListSnapshots(ctx(t), "", "sb-2"); err != nil || len(l) != 1 || l[0].ID != "snap-2" {
		t.Fatalf("ListSnapshots(sandbox sb-2): %v %v", l, err)
	}
	if l, err := ss.SnapshotsOfTemplate(ctx(t), "sha256:aaaa"); err != nil || len(l) != 1 || l[0].ID != "snap-1" {
		t.Fatalf("SnapshotsOfTemplate: %v %v", l, err)
	}

	// A live sandbox started from the snapshot holds it; an ended one not.
	mustPrincipal(t, s, "alice")
	user := newSandbox("sb-from", "alice", base)
	user.TemplateID = "sha256:aaaa"
	mustCreate(t, s, user)
	if err := ss.DeleteSnapshot(ctx(t), "snap-1"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete while a sandbox runs from it: %v, want ErrConflict", err)
	}
	if _, err := s.UpdateSandbox(ctx(t), "sb-from", func(sb *store.Sandbox) error { sb.State = "stopped"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := ss.DeleteSnapshot(ctx(t), "snap-1"); err != nil {
		t.Fatalf("delete once the sandbox ended: %v", err)
	}
	if err := ss.DeleteSnapshot(ctx(t), "snap-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v, want ErrNotFound", err)
	}
}

// testSnapshotMemory: a snapshot's memory image reference round-trips; a
// files-only one has none; one of the two fields alone is refused.
func testSnapshotMemory(t *testing.T, ss store.SnapshotStore) {
	sn := store.Snapshot{ID: "snap-m", Name: "mem", Owner: "alice", SandboxID: "sb-1", Template: "base",
		TemplateID: "sha256:aaaa", SizeBytes: 1, CreatedAt: base,
		MemoryBackend: "gvisor", MemoryRef: `{"id":"snap-x","data":{"dir":"/x"}}`}
	if err := ss.CreateSnapshot(ctx(t), sn); err != nil {
		t.Fatal(err)
	}
	if got, err := ss.GetSnapshot(ctx(t), "snap-m"); err != nil || got != sn {
		t.Fatalf("GetSnapshot: %+v %v, want %+v", got, err, sn)
	}
	if l, err := ss.ListSnapshots(ctx(t), "alice", ""); err != nil || len(l) != 1 || l[0] != sn {
		t.Fatalf("ListSnapshots: %+v %v", l, err)
	}
	half := sn
	half.ID, half.Name, half.MemoryBackend = "snap-h", "half", ""
	if err := ss.CreateSnapshot(ctx(t), half); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("memory_ref without memory_backend: %v, want ErrInvalid", err)
	}
	files := sn
	files.ID, files.Name, files.MemoryBackend, files.MemoryRef = "snap-f", "files", "", ""
	if err := ss.CreateSnapshot(ctx(t), files); err != nil {
		t.Fatal(err)
	}
	if got, err := ss.GetSnapshotByName(ctx(t), "alice", "files"); err != nil || got != files {
		t.Fatalf("files-only snapshot: %+v %v", got, err)
	}
}
