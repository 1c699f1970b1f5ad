package integration

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestTemplateTagOwnership: a templates:write holder may not re-point or
// remove another principal's tag (issue 15, item 8). Before tags had
// owners, tenant B could import over tenant A's shared:1, and A's next
// sandbox booted B's layers. Now tags belong to their creator; admins
// write every tag, and the tags they create are shared (admins only). Every
// tag change is audited with the old and the new template id.
func TestTemplateTagOwnership(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	tool := buildImageTool(t)

	tenant := func(n string) (*warden.Client, string) {
		p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: n})
		if err != nil {
			t.Fatalf("create principal: %v", err)
		}
		k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: n,
			Scopes: []string{"templates:read", "templates:write", "sandboxes:create", "sandboxes:exec"}})
		if err != nil {
			t.Fatalf("create key: %v", err)
		}
		return d.client(t, k.Key), p.ID
	}
	a, aID := tenant("tenant-a")
	b, bID := tenant("tenant-b")

	// importMarker imports an image holding the image tool and /marker.
	importMarker := func(c *warden.Client, tmpl, marker string) (warden.Template, error) {
		t.Helper()
		img, err := mutate.AppendLayers(empty.Image, layerOf(t,
			entry{name: "usr/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "usr/local/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "usr/local/bin/image-tool", typ: tar.TypeReg, mode: 0o755, body: tool},
			entry{name: "marker", typ: tar.TypeReg, mode: 0o644, body: []byte(marker)},
		))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "image.tar")
		tag, _ := name.NewTag("example.com/marker:1")
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return c.ImportArchive(ctxT(t), warden.ArchiveImport{Name: tmpl}, f, nil)
	}
	// markerOf boots a sandbox of tmpl as c and reads its /marker.
	markerOf := func(c *warden.Client, tmpl string) string {
		t.Helper()
		sb := create(t, c, warden.CreateSandboxRequest{Template: tmpl})
		defer c.KillSandbox(ctxT(t), sb.ID)
		var out, errb bytes.Buffer
		res, err := c.Exec(ctxT(t), sb.ID, warden.ExecRequest{Cmd: []string{"/usr/local/bin/image-tool", "cat", "/marker"}},
			warden.ExecIO{Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("cat /marker in %s: %v exit %d\n%s%s", tmpl, err, res.ExitCode, out.String(), errb.String())
		}
		return out.String()
	}
	forbidden := func(what string, err error) {
		t.Helper()
		var we *warden.Error
		if !errors.As(err, &we) || we.Status != 403 || we.Code != "forbidden" {
			t.Errorf("%s: %v, want 403 forbidden", what, err)
		}
	}

	// A creates shared:1 and owns it.
	tmA, err := importMarker(a, "shared:1", "A")
	if err != nil {
		t.Fatalf("A imports shared:1: %v", err)
	}
	if tmA.Owner != aID {
		t.Errorf("shared:1 owner %q, want A (%s)", tmA.Owner, aID)
	}

	// B can neither re-point it (import or build) nor remove it.
	_, err = importMarker(b, "shared:1", "B")
	forbidden("B imports over A's shared:1", err)
	bctx := tarDir(t, writeContext(t, map[string]string{"Dockerfile": "FROM base\nUSER root\nRUN echo B > /marker\n"}))
	_, err = b.BuildTemplate(ctxT(t), warden.BuildRequest{Name: "shared:1"}, bctx, nil)
	forbidden("B builds over A's shared:1", err)
	forbidden("B deletes A's shared:1", b.DeleteTemplate(ctxT(t), "shared:1"))
	got, err := a.GetTemplate(ctxT(t), "shared:1")
	if err != nil || got.ID != tmA.ID || got.Owner != aID {
		t.Fatalf("shared:1 after B's attempts: %+v, %v; want id %s owned by A", got, err, tmA.ID)
	}
	// Reading stays shared: B may see A's template.
	if _, err := b.GetTemplate(ctxT(t), "shared:1"); err != nil {
		t.Errorf("B inspects shared:1: %v", err)
	}
	// A's next sandbox boots A's layers.
	if m := markerOf(a, "shared:1"); m != "A" {
		t.Fatalf("A's sandbox of shared:1 reads marker %q, want A", m)
	}

	// B has tags of its own, which it may remove and A may not touch.
	tmB, err := importMarker(b, "tenant-b/tool:1", "B")
	if err != nil {
		t.Fatalf("B imports its own tag: %v", err)
	}
	if tmB.Owner != bID {
		t.Errorf("tenant-b/tool:1 owner %q, want B (%s)", tmB.Owner, bID)
	}
	_, err = importMarker(a, "tenant-b/tool:1", "A")
	forbidden("A imports over B's tag", err)
	if err := b.DeleteTemplate(ctxT(t), "tenant-b/tool:1"); err != nil {
		t.Errorf("B deletes its own tag: %v", err)
	}

	// The owner re-points its own tag.
	tmA2, err := importMarker(a, "shared:1", "A2")
	if err != nil {
		t.Fatalf("A re-points shared:1: %v", err)
	}
	if m := markerOf(a, "shared:1"); m != "A2" {
		t.Errorf("after A's re-point, shared:1 reads marker %q, want A2", m)
	}

	// Tags an admin creates are shared: only admins write them.
	tmP, err := importMarker(admin, "platform:1", "P")
	if err != nil {
		t.Fatalf("admin imports platform:1: %v", err)
	}
	if tmP.Owner != "" {
		t.Errorf("admin-created platform:1 owned by %q, want shared", tmP.Owner)
	}
	_, err = importMarker(a, "platform:1", "A")
	forbidden("A imports over the shared platform:1", err)
	forbidden("A deletes the shared platform:1", a.DeleteTemplate(ctxT(t), "platform:1"))
	if m := markerOf(b, "platform:1"); m != "P" {
		t.Errorf("platform:1 reads marker %q, want P", m)
	}

	// An admin removes anyone's tag.
	if err := admin.DeleteTemplate(ctxT(t), "shared:1"); err != nil {
		t.Fatalf("admin deletes shared:1: %v", err)
	}
	if _, err := admin.GCTemplates(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// The audit log shows every change of shared:1 with the old and the new
	// id, and B's refused attempts as denials.
	var evs []warden.AuditEvent
	for ev, err := range admin.AllAuditEvents(ctxT(t), warden.AuditQuery{Target: "shared:1"}) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	find := func(action, principal, outcome string) []warden.AuditEvent {
		var out []warden.AuditEvent
		for _, ev := range evs {
			if ev.Action == action && ev.PrincipalID == principal && ev.Outcome == outcome {
				out = append(out, ev)
			}
		}
		return out
	}
	detail := func(ev warden.AuditEvent, k string) string {
		s, _ := ev.Detail[k].(string)
		return s
	}
	imports := find("template.import", aID, "success")
	if len(imports) != 2 {
		t.Fatalf("A's imports of shared:1 in the audit log: %+v", imports)
	}
	if detail(imports[0], "id") != tmA.ID || detail(imports[0], "old_id") != "" {
		t.Errorf("creation of shared:1 audited as %v, want id %s and no old_id", imports[0].Detail, tmA.ID)
	}
	if detail(imports[1], "id") != tmA2.ID || detail(imports[1], "old_id") != tmA.ID {
		t.Errorf("re-point of shared:1 audited as %v, want old_id %s -> id %s", imports[1].Detail, tmA.ID, tmA2.ID)
	}
	if n := len(find("template.import", bID, "denied")) + len(find("template.build", bID, "denied")) +
		len(find("template.delete", bID, "denied")); n != 3 {
		t.Errorf("B's refused import, build and delete: %d denied audit events, want 3\n%+v", n, evs)
	}
	if del := find("template.delete", "", "success"); len(del) != 0 {
		t.Errorf("a delete audited without a principal: %+v", del)
	}
	var adminID string
	if who, err := admin.Whoami(ctxT(t)); err == nil {
		adminID = who.Principal.ID
	} else {
		t.Fatal(err)
	}
	del := find("template.delete", adminID, "success")
	if len(del) != 1 || detail(del[0], "old_id") != tmA2.ID {
		t.Errorf("admin's delete of shared:1 audited as %+v, want old_id %s", del, tmA2.ID)
	}
	// GC's event lists the template versions it removed: B's deleted tag's
	// (A's versions may stay while records of A's sandboxes name them).
	var gcIDs []string
	for ev, err := range admin.AllAuditEvents(ctxT(t), warden.AuditQuery{Principal: adminID}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Action == "template.gc" {
			ids, _ := ev.Detail["removed_ids"].([]any)
			for _, id := range ids {
				s, _ := id.(string)
				gcIDs = append(gcIDs, s)
			}
		}
	}
	if !slices.Contains(gcIDs, tmB.ID) {
		t.Errorf("gc audit event lists removed ids %v, want %s (tenant-b/tool:1, deleted)", gcIDs, tmB.ID)
	}
	if strings.Contains(strings.Join(gcIDs, ","), tmP.ID) {
		t.Errorf("gc removed the tagged platform:1 (%s)", tmP.ID)
	}
}
