package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSnapshots, on the native backend with one daemon: a snapshot of a
// running sandbox (files written by the user and by root, a file of the
// template removed, under / and under /usr) starts 5 sandboxes that each
// see exactly the captured files while the source keeps running; a bad
// request (unknown sandbox, duplicate or invalid name, deleting a snapshot
// in use) gets a clear error and leaves nothing; a promoted snapshot is a
// template; E2B's snapshot routes map onto the same snapshots.
func TestSnapshots(t *testing.T) {
	state, run := newDirs(t)
	e2bAddr := freePort(t)
	d := startDaemon(t, state, run, "--e2b-listen", e2bAddr)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)

	src, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	// A counter the source keeps writing shows it runs after the snapshot.
	setup := `set -e
mkdir -p /home/user/work/deep && echo captured > /home/user/work/deep/a.txt
ln -s deep/a.txt /home/user/work/link && ln /home/user/work/deep/a.txt /home/user/work/hard
sudo sh -c 'echo by-root > /opt/rootfile && chmod 640 /opt/rootfile'
sudo rm /usr/bin/xargs
(while :; do date +%s%N > /tmp/tick; sleep 0.05; done) >/dev/null 2>&1 &
echo ok`
	if out, code := sh(t, c, src.ID, setup); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("setup (exit %d): %s", code, out)
	}

	snap, err := c.CreateSnapshot(ctx, src.ID, "good")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name != "good" || snap.SandboxID != src.ID || !strings.HasPrefix(snap.ID, "snap-") || !strings.HasPrefix(snap.TemplateID, "sha256:") || snap.SizeBytes <= 0 {
		t.Fatalf("snapshot: %+v", snap)
	}
	// The source runs on: its record, and its counter moves.
	if sb, err := c.GetSandbox(ctx, src.ID); err != nil || sb.State != "running" {
		t.Fatalf("source after the snapshot: %+v %v", sb, err)
	}
	tick := func() string { out, _ := sh(t, c, src.ID, "cat /tmp/tick"); return out }
	t0 := tick()
	time.Sleep(300 * time.Millisecond)
	if t1 := tick(); t1 == t0 {
		t.Fatalf("the source's processes do not run after the snapshot (tick %q)", t1)
	}
	// Written after the snapshot: not in it.
	sh(t, c, src.ID, "echo later > /home/user/work/later.txt")

	t.Run("BadInput", func(t *testing.T) {
		_, err := c.CreateSnapshot(ctx, "sb-nosuchsandboxxxxx", "x")
		wantStatus(t, "unknown sandbox", err, 404)
		_, err = c.CreateSnapshot(ctx, src.ID, "good")
		wantStatus(t, "duplicate name", err, 409)
		_, err = c.CreateSnapshot(ctx, src.ID, "Bad/Name")
		wantStatus(t, "invalid name", err, 422)
		_, err = c.CreateSnapshotWithMemory(ctx, src.ID, "mem") // native: no memory snapshots
		wantStatus(t, "memory snapshot of a native sandbox", err, 422)
		_, err = c.GetSnapshot(ctx, "mem")
		wantStatus(t, "refused memory snapshot", err, 404)
		_, err = c.GetSnapshot(ctx, "nosuch")
		wantStatus(t, "unknown snapshot", err, 404)
		_, err = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Snapshot: "nosuch"})
		wantStatus(t, "create from an unknown snapshot", err, 404)
		_, err = c.CreateSandbox(ctx, warden.CreateSandboxRequest{Snapshot: "good", Template: "base"})
		wantStatus(t, "template and snapshot", err, 422)
		// Another principal neither sees nor boots it, even by its template id.
		other := d.client(t, agentKey(t, c, "snap-other"))
		_, err = other.GetSnapshot(ctx, "good")
		wantStatus(t, "another's snapshot", err, 404)
		_, err = other.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: snap.TemplateID})
		wantStatus(t, "another's snapshot by template id", err, 422)
		_, err = other.GetTemplate(ctx, snap.TemplateID)
		wantStatus(t, "another's snapshot's manifest by template id", err, 404)
		if tm, err := c.GetTemplate(ctx, snap.TemplateID); err != nil || tm.ID != snap.TemplateID {
			t.Fatalf("the owner reads its snapshot's template: %+v %v", tm, err)
		}
		if l, err := c.ListSnapshots(ctx, ""); err != nil || len(l) != 1 {
			t.Fatalf("snapshots after refused creates: %+v %v", l, err)
		}
		if left := tmpLeft(t, state); len(left) > 0 {
			t.Fatalf("refused snapshots left files: %v", left)
		}
	})

	// Five sandboxes from the snapshot, at once.
	const n = 5
	clones := make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Snapshot: "good", TimeoutSeconds: 600})
			clones[i], errs[i] = sb.ID, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("clone %d: %v", i, err)
		}
	}
	check := `cat /home/user/work/deep/a.txt /home/user/work/link /home/user/work/hard
stat -c '%u %a' /opt/rootfile /home/user/work/deep/a.txt /home/user/work/hard
sudo cat /opt/rootfile
test -e /usr/bin/xargs && echo xargs-present || echo xargs-gone
test -e /home/user/work/later.txt && echo later-present || echo later-absent
test -e /usr/bin/find && echo find-present
whoami; pwd`
	want := "captured\ncaptured\ncaptured\n0 640\n1000 644\n1000 644\nby-root\nxargs-gone\nlater-absent\nfind-present\nuser\n/home/user\n"
	for _, id := range clones {
		out, code := sh(t, c, id, check)
		if code != 0 || out != want {
			t.Fatalf("clone %s (exit %d):\n%s\nwant:\n%s", id, code, out, want)
		}
	}
	// The clones are independent: one's write is not another's.
	sh(t, c, clones[0], "echo mine > /home/user/work/deep/a.txt")
	if out, _ := sh(t, c, clones[1], "cat /home/user/work/deep/a.txt"); out != "captured\n" {
		t.Fatalf("a clone sees another's write: %q", out)
	}
	if out, _ := sh(t, c, src.ID, "cat /home/user/work/deep/a.txt /home/user/work/later.txt"); out != "captured\nlater\n" {
		t.Fatalf("the source's files changed: %q", out)
	}

	err = c.DeleteSnapshot(ctx, "good")
	wantStatus(t, "delete while sandboxes run from it", err, 409)

	t.Run("Promote", func(t *testing.T) {
		tm, err := c.PromoteSnapshot(ctx, "good", "snapped:v1")
		if err != nil {
			t.Fatal(err)
		}
		if tm.Name != "snapped:v1" || tm.ID != snap.TemplateID {
			t.Fatalf("promoted template: %+v", tm)
		}
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: "snapped:v1", TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := sh(t, c, sb.ID, "cat /home/user/work/deep/a.txt"); out != "captured\n" {
			t.Fatalf("sandbox from the promoted template: %q", out)
		}
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("E2B", func(t *testing.T) {
		status, body, _ := e2bSnap(t, e2bAddr, d.adminKey, "POST", "/sandboxes/"+src.ID+"/snapshots", `{"name":"via-e2b"}`)
		var info struct {
			SnapshotID string   `json:"snapshotID"`
			Names      []string `json:"names"`
		}
		if status != 201 || json.Unmarshal(body, &info) != nil || !strings.HasPrefix(info.SnapshotID, "snap-") || len(info.Names) != 1 || info.Names[0] != "via-e2b" {
			t.Fatalf("e2b createSnapshot: %d %s", status, body)
		}
		sum := sha256.Sum256([]byte("warden snapshot\x00" + info.SnapshotID + "\x00/"))
		layer := filepath.Join(state, "templates", "layers", hex.EncodeToString(sum[:]))
		if _, err := os.Lstat(layer); err != nil {
			t.Fatalf("the snapshot's captured layer: %v", err)
		}
		status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "POST", "/sandboxes/nosuchsandbox0000000/snapshots", `{}`)
		if status != 404 || !bytes.Contains(body, []byte(`"code":404`)) {
			t.Fatalf("e2b createSnapshot of an unknown sandbox: %d %s", status, body)
		}
		status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "GET", "/snapshots?sandboxID="+src.ID, "")
		var list []struct {
			SnapshotID string   `json:"snapshotID"`
			Names      []string `json:"names"`
		}
		if status != 200 || json.Unmarshal(body, &list) != nil || len(list) != 2 || list[1].SnapshotID != info.SnapshotID {
			t.Fatalf("e2b listSnapshots: %d %s", status, body)
		}
		status, body, hdr := e2bSnap(t, e2bAddr, d.adminKey, "GET", "/snapshots?limit=1", "")
		if status != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 || hdr.Get("X-Next-Token") == "" {
			t.Fatalf("e2b listSnapshots page: %d %s %v", status, body, hdr)
		}
		status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "POST", "/sandboxes", `{"templateID":"`+info.SnapshotID+`","timeout":300}`)
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		if status != 201 || json.Unmarshal(body, &sb) != nil || sb.SandboxID == "" {
			t.Fatalf("e2b create from a snapshot: %d %s", status, body)
		}
		if out, _ := sh(t, c, sb.SandboxID, "cat /home/user/work/later.txt"); out != "later\n" {
			t.Fatalf("sandbox from the E2B snapshot: %q", out)
		}
		status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "DELETE", "/templates/"+info.SnapshotID, "")
		if status != 409 {
			t.Fatalf("e2b deleteSnapshot in use: %d %s", status, body)
		}
		if status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "DELETE", "/sandboxes/"+sb.SandboxID, ""); status != 204 {
			t.Fatalf("e2b kill: %d %s", status, body)
		}
		if status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "DELETE", "/templates/"+info.SnapshotID, ""); status != 204 {
			t.Fatalf("e2b deleteSnapshot: %d %s", status, body)
		}
		status, body, _ = e2bSnap(t, e2bAddr, d.adminKey, "DELETE", "/templates/"+info.SnapshotID, "")
		if status != 404 || !bytes.Contains(body, []byte(`"code":404`)) {
			t.Fatalf("e2b deleteSnapshot twice: %d %s", status, body)
		}
		// Its captured layer goes with it (a collection in the background).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := os.Lstat(layer); errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the deleted snapshot's layer %s is still there", layer)
			}
		}
	})

	// Once the clones are gone the snapshot can go; the promoted template
	// keeps its files.
	for _, id := range clones {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteSnapshot(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListSnapshots(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("snapshots after delete: %+v %v", l, err)
	}
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: "snapped:v1", TimeoutSeconds: 600})
	if err != nil {
		t.Fatalf("the promoted template after its snapshot's delete: %v", err)
	}
	if out, _ := sh(t, c, sb.ID, "cat /home/user/work/deep/a.txt"); out != "captured\n" {
		t.Fatalf("sandbox from the promoted template after the delete: %q", out)
	}
	if sb, err := c.GetSandbox(ctx, src.ID); err != nil || sb.State != "running" {
		t.Fatalf("source at the end: %+v %v", sb, err)
	}
	if left := tmpLeft(t, state); len(left) > 0 {
		t.Fatalf("snapshot files left in the template store's tmp: %v", left)
	}
}

// tmpLeft lists what snapshots left in the template store's tmp directory.
func tmpLeft(t *testing.T, state string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(state, "templates", "tmp", "snapshot-*"))
	return m
}

// agentKey makes an agent principal called name and returns a key of it
// that creates and reads sandboxes.
func agentKey(t *testing.T, admin *warden.Client, name string) string {
	t.Helper()
	p, err := admin.CreatePrincipal(ctxT(t), warden.CreatePrincipalRequest{Kind: "agent", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateKey(ctxT(t), warden.CreateKeyRequest{PrincipalID: p.ID, Scopes: []string{"sandboxes:create", "sandboxes:read", "templates:read"}})
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// e2bCall makes one call to the E2B API at addr with key.
func e2bSnap(t *testing.T, addr, key, method, path, body string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t), method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}
