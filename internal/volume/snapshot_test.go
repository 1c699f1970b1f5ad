package volume

import (
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

func readVol(t *testing.T, m *Manager, v store.Volume, p string) string {
	t.Helper()
	var got []byte
	err := m.Download(t.Context(), v, p, func(f *os.File, _ int64) error {
		var err error
		got, err = io.ReadAll(f)
		return err
	})
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(got)
}

func writeVol(t *testing.T, m *Manager, v store.Volume, p, s string) {
	t.Helper()
	if _, err := m.Upload(t.Context(), v, p, strings.NewReader(s), 0); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func hashFile(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// frozen reports whether the filesystem mounted at dir is frozen: FITHAW
// on one that is not fails with EINVAL (and thaws one that is).
func frozen(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlFITHAW, 0)
	return e == 0
}

// TestVolumeSnapshotRestore: snapshot, overwrite, restore gives the old
// files back; names are unique per volume; a restore after a resize keeps
// the size; a volume made from a snapshot has its files; deleting the
// volume deletes its snapshots' images.
func TestVolumeSnapshotRestore(t *testing.T) {
	m, _ := newManager(t)
	ctx := t.Context()
	v, err := m.Create(ctx, "alice", "data", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	writeVol(t, m, v, "a/f.txt", "one")
	sn, err := m.Snapshot(ctx, v, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sn.SizeBytes != 32<<20 || sn.StoredBytes <= 0 || sn.StoredBytes >= 32<<20 || sn.VolumeID != v.ID || sn.Owner != "alice" {
		t.Fatalf("snapshot %+v: want the volume's size, stored sparsely", sn)
	}
	if _, err := m.Snapshot(ctx, v, "s1"); !errors.Is(err, ErrSnapshotTaken) {
		t.Fatalf("second s1: %v", err)
	}
	if k, _ := errkind.Of(func() error { _, err := m.Snapshot(ctx, v, "s1"); return err }()); k != errkind.Conflict {
		t.Fatalf("taken name kind %v", k)
	}
	if _, err := m.Snapshot(ctx, v, "../x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	auto, err := m.Snapshot(ctx, v, "")
	if err != nil || !strings.HasPrefix(auto.Name, "snap-") {
		t.Fatalf("unnamed snapshot: %+v %v", auto, err)
	}
	writeVol(t, m, v, "a/f.txt", "two")
	writeVol(t, m, v, "new.txt", "later")
	if v, err = m.Resize(ctx, v, 64<<20); err != nil {
		t.Fatal(err)
	}
	got, err := m.GetSnapshot(ctx, v, "s1")
	if err != nil || got != sn {
		t.Fatalf("get s1: %+v %v", got, err)
	}
	if _, err := m.GetSnapshot(ctx, v, "nope"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("get a missing snapshot: %v", err)
	}
	if err := m.Restore(ctx, v, sn); err != nil {
		t.Fatal(err)
	}
	if s := readVol(t, m, v, "a/f.txt"); s != "one" {
		t.Fatalf("after restore: %q, want one", s)
	}
	if err := m.Download(ctx, v, "new.txt", func(*os.File, int64) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file written after the snapshot survives the restore: %v", err)
	}
	m.use(ctx, v.ID, func(dir string) error {
		var sf unix.Statfs_t
		unix.Statfs(dir, &sf)
		if total := int64(sf.Blocks) * sf.Bsize; total < 56<<20 {
			t.Errorf("filesystem of %d bytes after restoring into a 64 MiB volume", total)
		}
		return nil
	})
	if _, err := os.Stat(m.image(v.ID) + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary image left: %v", err)
	}

	c, err := m.CreateFrom(ctx, "alice", "copy", sn)
	if err != nil {
		t.Fatal(err)
	}
	if s := readVol(t, m, c, "a/f.txt"); s != "one" || c.SizeBytes != 32<<20 {
		t.Fatalf("volume from a snapshot: %q size %d", s, c.SizeBytes)
	}
	if _, err := m.CreateFrom(ctx, "bob", "copy", sn); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("another owner's snapshot: %v", err)
	}

	list, err := m.Snapshots(ctx, v)
	if err != nil || len(list) != 2 || list[0].Name != "s1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := m.DeleteSnapshot(ctx, auto); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.snapImage(auto.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted snapshot's image: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, auto); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := m.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.snapImage(sn.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot image of a deleted volume: %v", err)
	}
	m.Delete(ctx, c)
	if ents, _ := os.ReadDir(m.snapDir()); len(ents) != 0 {
		t.Fatalf("left in the snapshot dir: %v", ents)
	}
}

// TestVolumeSnapshotMounted: a volume a sandbox mounts read-write is
// frozen for the copy (its unsynced writes are in the snapshot) and thawed
// after, also when the copy fails or panics; a restore is refused while a
// live sandbox mounts it.
func TestVolumeSnapshotMounted(t *testing.T) {
	m, st := newManager(t)
	ctx := t.Context()
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "alice", Kind: store.PrincipalAgent, Name: "alice", CreatedAt: timeNow()}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSandbox(ctx, store.Sandbox{ID: "sb-a", Template: "base", State: "running", Owner: "alice", Backend: "native", CreatedAt: timeNow()}); err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "alice", "live", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	writeVol(t, m, v, "f", "before")
	early, err := m.Snapshot(ctx, v, "early")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := m.Attach(ctx, "alice", "sb-a", []Request{{Name: "live", Path: "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := mounts[0].Source
	// A write the sandbox made, not yet on the image.
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("during"), 0o644); err != nil {
		t.Fatal(err)
	}
	sn, err := m.Snapshot(ctx, v, "live")
	if err != nil {
		t.Fatal(err)
	}
	if frozen(t, dir) {
		t.Fatal("the volume stays frozen after a snapshot")
	}
	if err := m.Restore(ctx, v, early); !errors.Is(err, ErrInUse) {
		t.Fatalf("restore while mounted: %v, want ErrInUse", err)
	}
	if k, _ := errkind.Of(m.Restore(ctx, v, early)); k != errkind.Conflict {
		t.Fatalf("restore while mounted kind %v", k)
	}

	// A copy that fails, or panics, midway: thawed, nothing left.
	t.Cleanup(func() { copyFault = nil })
	copyFault = func(int64) error { return errors.New("disk on fire") }
	if _, err := m.Snapshot(ctx, v, "broken"); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("failing copy: %v", err)
	}
	if frozen(t, dir) {
		t.Fatal("a failed snapshot leaves the volume frozen")
	}
	copyFault = func(int64) error { panic("boom") }
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		m.Snapshot(ctx, v, "panicked")
	}()
	copyFault = nil
	if frozen(t, dir) {
		t.Fatal("a panicking snapshot leaves the volume frozen")
	}
	if ents, _ := os.ReadDir(m.snapDir()); len(ents) != 2 {
		t.Fatalf("snapshot images %v, want early and live only", ents)
	}
	if list, _ := m.Snapshots(ctx, v); len(list) != 2 {
		t.Fatalf("snapshots %+v, want early and live only", list)
	}
	// The volume's lock was released: the sandbox writes on.
	if err := os.WriteFile(filepath.Join(dir, "g"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Detach(ctx, "sb-a")
	if err := m.Restore(ctx, v, sn); err != nil {
		t.Fatal(err)
	}
	if s := readVol(t, m, v, "f"); s != "during" {
		t.Fatalf("snapshot of a mounted volume holds %q, want the unsynced write", s)
	}
}

// TestVolumeRestoreCrashSafe: a restore whose copy fails midway leaves the
// volume's image as it was and no temporary image.
func TestVolumeRestoreCrashSafe(t *testing.T) {
	m, _ := newManager(t)
	ctx := t.Context()
	v, err := m.Create(ctx, "alice", "safe", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	writeVol(t, m, v, "f", "old")
	sn, err := m.Snapshot(ctx, v, "s")
	if err != nil {
		t.Fatal(err)
	}
	writeVol(t, m, v, "f", "current")
	before := hashFile(t, m.image(v.ID))
	t.Cleanup(func() { copyFault = nil })
	copyFault = func(copied int64) error {
		if _, err := os.Stat(m.image(v.ID) + ".restore"); err != nil {
			t.Errorf("no temporary image beside the volume's during the copy: %v", err)
		}
		return errors.New("crash")
	}
	if err := m.Restore(ctx, v, sn); err == nil {
		t.Fatal("restore with a failing copy succeeded")
	}
	copyFault = nil
	if hashFile(t, m.image(v.ID)) != before {
		t.Fatal("a failed restore changed the volume's image")
	}
	if _, err := os.Stat(m.image(v.ID) + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary image left: %v", err)
	}
	if s := readVol(t, m, v, "f"); s != "current" {
		t.Fatalf("after a failed restore: %q", s)
	}
	// A daemon that died mid-copy left a temporary and an orphan image:
	// Reconcile removes them.
	os.WriteFile(m.image(v.ID)+".restore", []byte("x"), 0o600)
	os.WriteFile(m.snapImage("vsn-orphan"), []byte("x"), 0o600)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{m.image(v.ID) + ".restore", m.snapImage("vsn-orphan")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after reconcile: %v", p, err)
		}
	}
	if _, err := os.Stat(m.snapImage(sn.ID)); err != nil {
		t.Fatalf("a snapshot's image after reconcile: %v", err)
	}
	if err := m.Restore(ctx, v, sn); err != nil {
		t.Fatal(err)
	}
	if s := readVol(t, m, v, "f"); s != "old" {
		t.Fatalf("after restore: %q", s)
	}
}

// TestSparseCopy: holes stay holes, data lands at its offsets.
func TestSparseCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, _ := os.Create(src)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 20<<20)
	f.Truncate(24 << 20)
	f.Close()
	size, stored, err := copyImage(t.Context(), src, filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	if size != 24<<20 || stored > 1<<20 {
		t.Fatalf("size %d stored %d: want 24 MiB, a few blocks", size, stored)
	}
	if hashFile(t, src) != hashFile(t, filepath.Join(dir, "dst")) {
		t.Fatal("copy differs")
	}
	if _, _, err := copyImage(t.Context(), src, filepath.Join(dir, "dst")); err == nil {
		t.Fatal("copy over an existing file")
	}
}
