package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/volume"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestVolumeSnapshotsAPI drives volume snapshots through the SDK against a
// server with real volumes: snapshot, overwrite, restore, a volume made
// from a snapshot, names per volume, another principal's 404s; and the
// volume copy routes as governed file actions: a rule on file paths
// catches a copy into a volume, and file.volume names it.
func TestVolumeSnapshotsAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("VOLUME SNAPSHOTS UNTESTED HERE: needs root (loop devices, mounts)")
	}
	ctx := ctxT(t, 120*time.Second)
	vs, ok := env.st.(store.VolumeStore)
	if !ok {
		t.Fatal("the test store keeps no volumes")
	}
	vm, err := volume.New(volume.Config{Dir: t.TempDir(), UID: 1000, GID: 1000}, vs)
	if err != nil {
		t.Fatalf("this host cannot make volumes: %v", err)
	}
	g := govern.New(govern.Config{Store: env.st, Audit: env.alog, Access: govern.CheckedAccess()})
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Volumes = vm
	cfg.Govern = g
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); g.Close() })

	p, key := govUser(t, "volsnap", auth.ScopeSandboxesCreate, auth.ScopeSandboxesRead, auth.ScopeFilesRead, auth.ScopeFilesWrite)
	_, otherKey := govUser(t, "volsnap-other", auth.ScopeSandboxesCreate, auth.ScopeSandboxesRead, auth.ScopeFilesRead, auth.ScopeFilesWrite)
	cl := func(k string) *warden.Client {
		c, err := warden.New(warden.WithBaseURL(hs.URL), warden.WithAPIKey(k), warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := cl(key), cl(otherKey)
	read := func(vol, path string) string {
		t.Helper()
		rc, err := a.ReadVolumeFile(ctx, vol, path)
		if err != nil {
			t.Fatalf("read %s:%s: %v", vol, path, err)
		}
		defer rc.Close()
		got, _ := io.ReadAll(rc)
		return string(got)
	}

	name := "snapvol"
	if _, err := a.CreateVolume(ctx, name, 16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DeleteVolume(ctxT(t, 30*time.Second), name) })
	if _, err := a.WriteVolumeFile(ctx, name, "/notes/a.txt", strings.NewReader("one"), 0); err != nil {
		t.Fatal(err)
	}
	sn, err := a.SnapshotVolume(ctx, name, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sn.Name != "s1" || sn.Volume != name || sn.SizeBytes != 16<<20 || sn.ID == "" || sn.CreatedAt.IsZero() {
		t.Fatalf("snapshot %+v", sn)
	}
	if _, err := a.SnapshotVolume(ctx, name, "s1"); !warden.IsConflict(err) {
		t.Fatalf("second s1: %v, want 409", err)
	}
	if _, err := a.SnapshotVolume(ctx, name, "Bad/Name"); !warden.IsValidationFailed(err) {
		t.Fatalf("bad name: %v, want 422", err)
	}
	if _, err := a.WriteVolumeFile(ctx, name, "/notes/a.txt", strings.NewReader("two"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RestoreVolume(ctx, name, "s1"); err != nil {
		t.Fatal(err)
	}
	if got := read(name, "/notes/a.txt"); got != "one" {
		t.Fatalf("after restore: %q, want one", got)
	}
	list, err := a.ListVolumeSnapshots(ctx, name)
	if err != nil || len(list) != 1 || list[0].ID != sn.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	// Another principal sees none of it.
	if _, err := b.ListVolumeSnapshots(ctx, name); !warden.IsNotFound(err) {
		t.Fatalf("another's list: %v, want 404", err)
	}
	if _, err := b.RestoreVolume(ctx, name, "s1"); !warden.IsNotFound(err) {
		t.Fatalf("another's restore: %v, want 404", err)
	}
	if _, err := b.CreateVolumeFromSnapshot(ctx, "stolen", name, "s1"); !warden.IsNotFound(err) {
		t.Fatalf("a volume from another's snapshot: %v, want 404", err)
	}
	// A volume made from the snapshot.
	if _, err := a.CreateVolumeFromSnapshot(ctx, name+"-copy", name, "s1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DeleteVolume(ctxT(t, 30*time.Second), name+"-copy") })
	if got := read(name+"-copy", "/notes/a.txt"); got != "one" {
		t.Fatalf("volume from a snapshot: %q", got)
	}
	if err := a.DeleteVolumeSnapshot(ctx, name, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteVolumeSnapshot(ctx, name, "s1"); !warden.IsNotFound(err) {
		t.Fatalf("second delete: %v, want 404", err)
	}
	if _, err := a.RestoreVolume(ctx, name, "s1"); !warden.IsNotFound(err) {
		t.Fatalf("restore of a deleted snapshot: %v, want 404", err)
	}

	// Governed: a rule on file paths catches a copy into a volume; one on
	// volume.change catches a restore.
	pid := "volsnap-" + uniq()
	_, err = g.CreatePolicy(ctx, govern.Policy{ID: pid, Scope: govern.Scope{Kind: govern.ScopePrincipal, ID: p.ID}, Rules: []govern.Rule{
		{ID: "no-etc", Kinds: []govern.Kind{govern.KindFileWrite}, When: `file.path.startsWith("/etc/")`, Outcome: govern.Deny, Message: "not /etc"},
		{ID: "no-restore", Kinds: []govern.Kind{govern.KindVolume}, When: `volume.op == "restore" && volume.snapshot == "frozen"`, Outcome: govern.Deny, Message: "keep it"},
	}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.DeletePolicy(ctxT(t, 10*time.Second), pid) })
	r := call(t, hs, key, "PUT", "/v1/volumes/"+name+"/files?path=/etc/passwd", "application/octet-stream", []byte("x"), nil)
	if r.status != http.StatusForbidden || r.apiError(t).Message != "denied by policy: not /etc" {
		t.Fatalf("copy into /etc of a volume: %d %s, want 403", r.status, r.body)
	}
	rec := decisionOf(t, eventsOf(t, r.reqID)[0])
	if f := rec.Action.File; rec.Action.Kind != govern.KindFileWrite || f == nil || f.Path != "/etc/passwd" || f.Volume != name || f.Op != "write" || f.Size != 1 {
		t.Errorf("recorded action %+v file %+v", rec.Action, rec.Action.File)
	}
	if _, err := a.WriteVolumeFile(ctx, name, "/home/ok", strings.NewReader("x"), 0); err != nil {
		t.Fatalf("a copy the rule does not catch: %v", err)
	}
	if _, err := a.SnapshotVolume(ctx, name, "frozen"); err != nil {
		t.Fatal(err)
	}
	r = call(t, hs, key, "POST", "/v1/volumes/"+name+"/restore", "application/json", []byte(`{"snapshot":"frozen"}`), nil)
	if r.status != http.StatusForbidden {
		t.Fatalf("governed restore: %d %s, want 403", r.status, r.body)
	}
	rec = decisionOf(t, eventsOf(t, r.reqID)[0])
	if v := rec.Action.Volume; rec.Action.Kind != govern.KindVolume || v == nil || v.Op != "restore" || v.Name != name || v.Snapshot != "frozen" {
		t.Errorf("recorded action %+v volume %+v", rec.Action, rec.Action.Volume)
	}
}
