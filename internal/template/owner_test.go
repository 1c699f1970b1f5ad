package template

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// manifestFor stores a distinct layerless manifest and returns its id.
func manifestFor(t *testing.T, s *Store, source string) string {
	t.Helper()
	id, err := s.PutManifest(&Manifest{Source: source, Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func openTestStore(t *testing.T) *Store {
	t.Helper()
	needRoot(t)
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTagOwnership(t *testing.T) {
	s := openTestStore(t)
	alice := Actor{Principal: "pr-alice"}
	bob := Actor{Principal: "pr-bob"}
	admin := Actor{Principal: "pr-admin", Admin: true}
	a1, a2 := manifestFor(t, s, "alice 1"), manifestFor(t, s, "alice 2")
	b1 := manifestFor(t, s, "bob 1")

	// A new tag belongs to its creator.
	if old, err := s.Tag("shared:1", a1, alice); err != nil || old != "" {
		t.Fatalf("alice creates shared:1: old %q, %v", old, err)
	}
	in, err := s.Inspect("shared:1")
	if err != nil || in.Owner != "pr-alice" || in.ID != a1 {
		t.Fatalf("inspect shared:1: %+v, %v; want owner pr-alice, id %s", in, err, a1)
	}
	// Someone else can neither re-point nor remove it, and nothing changes.
	if err := s.CheckTag("shared:1", bob); !errors.Is(err, ErrNotOwner) {
		t.Errorf("bob CheckTag shared:1: %v, want ErrNotOwner", err)
	}
	if _, err := s.Tag("shared:1", b1, bob); !errors.Is(err, ErrNotOwner) {
		t.Errorf("bob re-points shared:1: %v, want ErrNotOwner", err)
	}
	if _, err := s.Remove("shared:1", bob); !errors.Is(err, ErrNotOwner) {
		t.Errorf("bob removes shared:1: %v, want ErrNotOwner", err)
	}
	if id, err := s.Resolve("shared:1"); err != nil || id != a1 {
		t.Errorf("shared:1 after bob's attempts: %s, %v; want %s", id, err, a1)
	}
	// A principal-less actor owns nothing and may not create either.
	if _, err := s.Tag("anon:1", b1, Actor{}); !errors.Is(err, ErrNotOwner) {
		t.Errorf("tag without a principal: %v, want ErrNotOwner", err)
	}
	// The owner re-points its tag and learns the old id.
	if old, err := s.Tag("shared:1", a2, alice); err != nil || old != a1 {
		t.Errorf("alice re-points shared:1: old %q, %v; want %s", old, err, a1)
	}
	// Bob owns his own tags.
	if _, err := s.Tag("bob/tool", b1, bob); err != nil {
		t.Fatalf("bob creates his own tag: %v", err)
	}
	if _, err := s.Tag("bob/tool:latest", a1, alice); !errors.Is(err, ErrNotOwner) {
		t.Errorf("alice re-points bob/tool: %v, want ErrNotOwner", err)
	}
	// An admin may re-point anyone's tag; the owner stays.
	if old, err := s.Tag("bob/tool", a1, admin); err != nil || old != b1 {
		t.Errorf("admin re-points bob/tool: old %q, %v", old, err)
	}
	if in, _ := s.Inspect("bob/tool"); in.Owner != "pr-bob" {
		t.Errorf("bob/tool owner after the admin's re-point: %q, want pr-bob", in.Owner)
	}
	// Tags an admin creates are shared: only admins write them.
	if _, err := s.Tag("python:3.12", a1, admin); err != nil {
		t.Fatal(err)
	}
	if in, _ := s.Inspect("python:3.12"); in.Owner != "" {
		t.Errorf("admin-created tag owned by %q, want shared", in.Owner)
	}
	for _, who := range []Actor{alice, bob, {Principal: "pr-admin"}} {
		if _, err := s.Tag("python:3.12", b1, who); !errors.Is(err, ErrNotOwner) {
			t.Errorf("%s re-points the shared python:3.12: %v, want ErrNotOwner", who.Principal, err)
		}
		if _, err := s.Remove("python:3.12", who); !errors.Is(err, ErrNotOwner) {
			t.Errorf("%s removes the shared python:3.12: %v, want ErrNotOwner", who.Principal, err)
		}
	}
	// base is nobody's to change, an admin's included.
	if _, err := s.Tag("base", a1, admin); !errors.Is(err, ErrBuiltin) {
		t.Errorf("admin re-points base: %v, want ErrBuiltin", err)
	}
	if err := s.CheckTag("base:latest", admin); !errors.Is(err, ErrBuiltin) {
		t.Errorf("CheckTag base: %v, want ErrBuiltin", err)
	}
	// Removal by the owner and by an admin.
	if id, err := s.Remove("shared:1", alice); err != nil || id != a2 {
		t.Errorf("alice removes shared:1: %s, %v", id, err)
	}
	if id, err := s.Remove("bob/tool", admin); err != nil || id != a1 {
		t.Errorf("admin removes bob/tool: %s, %v", id, err)
	}
	// Ownership survives a restart.
	s2, err := OpenStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Tag("python:3.12", b1, bob); !errors.Is(err, ErrNotOwner) {
		t.Errorf("after reopening, bob re-points the shared tag: %v", err)
	}
	list, err := s2.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].Name != "python:3.12" || list[1].Owner != "" || !list[0].Builtin {
		t.Errorf("list after reopening: %+v", list)
	}
}

// TestTagsBeforeOwnership: tags.json written before tags had owners maps
// names to bare ids; those tags read as shared, so only admins change them.
func TestTagsBeforeOwnership(t *testing.T) {
	s := openTestStore(t)
	id := manifestFor(t, s, "legacy")
	legacy := []byte(`{"legacy:1": "` + id + `"}`)
	if err := os.WriteFile(filepath.Join(s.Root(), tagsFile), legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Inspect("legacy:1")
	if err != nil || in.ID != id || in.Owner != "" {
		t.Fatalf("legacy tag: %+v, %v", in, err)
	}
	other := manifestFor(t, s, "other")
	if _, err := s.Tag("legacy:1", other, Actor{Principal: "pr-x"}); !errors.Is(err, ErrNotOwner) {
		t.Errorf("a principal re-points a legacy tag: %v, want ErrNotOwner", err)
	}
	if _, err := s.Remove("legacy:1", Actor{Principal: "pr-x"}); !errors.Is(err, ErrNotOwner) {
		t.Errorf("a principal removes a legacy tag: %v, want ErrNotOwner", err)
	}
	if old, err := s.Tag("legacy:1", other, Actor{Principal: "pr-admin", Admin: true}); err != nil || old != id {
		t.Errorf("admin re-points a legacy tag: %q, %v", old, err)
	}
	// The store writes the new format, which reads back the same.
	s, err = OpenStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if in, err := s.Inspect("legacy:1"); err != nil || in.ID != other || in.Owner != "" {
		t.Errorf("after rewrite: %+v, %v", in, err)
	}
}

func TestGCReportsRemovedManifests(t *testing.T) {
	s := openTestStore(t)
	keep, gone := manifestFor(t, s, "keep"), manifestFor(t, s, "gone")
	if _, err := s.Tag("keep", keep, Actor{Principal: "pr-a"}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.GC(func() (map[string]bool, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Manifests != 1 || len(rep.RemovedManifests) != 1 || rep.RemovedManifests[0] != gone {
		t.Errorf("gc report %+v, want manifest %s removed", rep, gone)
	}
}

// FuzzTagsFile: tags.json in either format (bare ids from before
// ownership, or {id, owner} entries) never panics the reader, and what it
// reads writes back to the same entries.
func FuzzTagsFile(f *testing.F) {
	f.Add([]byte(`{"a:1":"sha256:` + strings.Repeat("ab", 32) + `"}`))
	f.Add([]byte(`{"a:1":{"id":"sha256:00","owner":"pr-x"},"b:latest":"sha256:11"}`))
	f.Add([]byte(`{"a:1":{"id":5}}`))
	f.Add([]byte(`{"a:1":null,"b":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var tags map[string]tagEntry
		if json.Unmarshal(b, &tags) != nil {
			return
		}
		out, err := json.Marshal(tags)
		if err != nil {
			t.Fatalf("marshal %v: %v", tags, err)
		}
		var again map[string]tagEntry
		if err := json.Unmarshal(out, &again); err != nil || !maps.Equal(tags, again) {
			t.Fatalf("round trip of %q: %v, %v != %v", out, err, again, tags)
		}
	})
}
