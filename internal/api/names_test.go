package api

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSandboxNames checks name resolution in sandboxFor: a name works where
// an id does (and the call acts on, and audits, the id), only among live
// sandboxes, the caller's own; another owner's is 404 like a missing one; an
// admin sees its own first, then every owner's, with 409 when several have
// it; a taken name is 409 on create and fork; a malformed one 422.
func TestSandboxNames(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	name := "n-" + uniq()

	sbA, err := env.a.CreateSandbox(ctx, warden.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if sbA.Name != name {
		t.Fatalf("created sandbox's name = %q, want %q", sbA.Name, name)
	}
	got, err := env.a.GetSandbox(ctx, name)
	if err != nil || got.ID != sbA.ID || got.Name != name {
		t.Fatalf("get by name: %+v, %v", got, err)
	}
	page, err := env.a.ListSandboxes(ctx, warden.ListOptions{})
	if err != nil || !slices.ContainsFunc(page.Sandboxes, func(sb warden.Sandbox) bool { return sb.ID == sbA.ID && sb.Name == name }) {
		t.Fatalf("list has no %s named %s: %v", sbA.ID, name, err)
	}

	// A second live one: 409 naming the holder; nothing created.
	_, err = env.a.CreateSandbox(ctx, warden.CreateSandboxRequest{Name: name})
	apiErr(t, err, 409, "conflict")
	if !strings.Contains(err.Error(), sbA.ID) {
		t.Errorf("conflict does not name the holder %s: %v", sbA.ID, err)
	}
	if live, _ := env.mgr.LiveByName(ctx, env.aID, name); len(live) != 1 {
		t.Errorf("A has %d live sandboxes named %s, want 1", len(live), name)
	}

	// Malformed names: 422, saying what a name is.
	for _, bad := range []string{"Web", "sb-" + name, "a_b", strings.Repeat("x", 64)} {
		_, err := env.a.CreateSandbox(ctx, warden.CreateSandboxRequest{Name: bad})
		apiErr(t, err, 422, "validation_failed")
		if !strings.Contains(err.Error(), "name: ") {
			t.Errorf("create with name %q: %v does not name the field", bad, err)
		}
	}
	// A fork with a name makes one sandbox only.
	_, err = env.a.ForkSandbox(ctx, name, warden.ForkRequest{Count: 2, Name: name + "-f"})
	apiErr(t, err, 422, "validation_failed")

	// B: A's name is invisible, exactly like a missing sandbox; B may use it.
	_, err = env.b.GetSandbox(ctx, name)
	apiErr(t, err, 404, "not_found")
	apiErr(t, env.b.KillSandbox(ctx, name), 404, "not_found")
	sbB, err := env.b.CreateSandbox(ctx, warden.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatalf("B's create of the same name: %v", err)
	}
	if got, err := env.b.GetSandbox(ctx, name); err != nil || got.ID != sbB.ID {
		t.Fatalf("B's get by name: %s, %v; want %s", got.ID, err, sbB.ID)
	}
	if got, err := env.a.GetSandbox(ctx, name); err != nil || got.ID != sbA.ID {
		t.Fatalf("A's get by name with B's live: %s, %v; want %s", got.ID, err, sbA.ID)
	}

	// The admin (sandboxes:all): two owners have it, so it is ambiguous.
	_, err = env.admin.GetSandbox(ctx, name)
	apiErr(t, err, 409, "conflict")
	if !strings.Contains(err.Error(), sbA.ID) || !strings.Contains(err.Error(), sbB.ID) {
		t.Errorf("ambiguity does not list both: %v", err)
	}

	// Kill by name acts on the id, and audits it.
	if err := env.b.KillSandbox(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got, err := env.admin.GetSandbox(ctx, sbB.ID); err != nil || !got.State.Terminal() {
		t.Fatalf("B's sandbox after kill by name: %s, %v", got.State, err)
	}
	events, err := env.st.ListAudit(ctx, store.AuditFilter{Target: sbB.ID, Action: "sandbox.kill"})
	if err != nil || len(events) != 1 || events[0].Outcome != "success" {
		t.Errorf("audit of the kill by name, by id %s: %+v, %v", sbB.ID, events, err)
	}
	// Now only A's is live: the admin reaches it by name.
	if got, err := env.admin.GetSandbox(ctx, name); err != nil || got.ID != sbA.ID {
		t.Fatalf("admin's get by name with only A's live: %s, %v; want %s", got.ID, err, sbA.ID)
	}
	// An ended sandbox is not reached by name: B's name is free again.
	_, err = env.b.GetSandbox(ctx, name)
	apiErr(t, err, 404, "not_found")
	again, err := env.b.CreateSandbox(ctx, warden.CreateSandboxRequest{Name: name})
	if err != nil || again.ID == sbB.ID {
		t.Fatalf("B's create after its sandbox ended: %s, %v", again.ID, err)
	}
	for _, id := range []string{again.ID, sbA.ID} {
		env.admin.KillSandbox(ctx, id)
	}
}
