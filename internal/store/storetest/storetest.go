// Package storetest is the conformance suite for store.Store
// implementations. Every implementation runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// open is called once per subtest and must return an empty store; it owns
// closing it (t.Cleanup). The suite uses real concurrency and checks only
// behaviour documented on store.Store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// Run runs every conformance test against stores returned by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"SandboxCRUD", testSandboxCRUD},
		{"SandboxUpdate", testSandboxUpdate},
		{"SandboxConcurrentUpdates", testSandboxConcurrentUpdates},
		{"SandboxConcurrentTransition", testSandboxConcurrentTransition},
		{"ListPagination", testListPagination},
		{"ListFilters", testListFilters},
		{"ListInvalidToken", testListInvalidToken},
		{"Principals", testPrincipals},
		{"PrincipalWithKeysIsAtomic", testPrincipalWithKeysAtomic},
		{"Keys", testKeys},
		{"AuditAppendAndList", testAudit},
		{"AuditWalk", testAuditWalk},
		{"SandboxNames", testSandboxNames},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// base is a fixed time with sub-microsecond precision so round trips are
// checked to the nanosecond.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func ctx(t *testing.T) context.Context { return t.Context() }

func mustPrincipal(t *testing.T, s store.Store, id string) store.Principal {
	t.Helper()
	p := store.Principal{ID: id, Kind: store.PrincipalAgent, Name: "name-" + id, CreatedAt: base}
	if err := s.CreatePrincipal(ctx(t), p); err != nil {
		t.Fatalf("CreatePrincipal(%s): %v", id, err)
	}
	return p
}

func newSandbox(id, owner string, created time.Time) store.Sandbox {
	return store.Sandbox{
		ID: id, Template: "base", TemplateID: "sha256:0123", Lifecycle: store.Lifecycle{AutoPause: true, Timeout: 5 * time.Minute}, Network: json.RawMessage(`{"mode":"allowlist","allow":[{"host":"pypi.org"}]}`), State: "starting", Owner: owner, Backend: "native",
		CPUMillis: 1000, MemoryMB: 512, DiskMB: 1024,
		Env:      map[string]string{"SECRET": "s3cr3t", "PATH": "/usr/bin"},
		Metadata: map[string]string{"team": "infra"},
		User:     "user", Workdir: "/home/user",
		CreatedAt: created, ExpiresAt: created.Add(5 * time.Minute),
		EnvdKey: "key-1",
	}
}

func mustCreate(t *testing.T, s store.Store, sb store.Sandbox) {
	t.Helper()
	if err := s.CreateSandbox(ctx(t), sb); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", sb.ID, err)
	}
}

// sameSandbox reports the first field that differs, comparing times with
// Equal and nil maps as empty.
func sameSandbox(got, want store.Sandbox) error {
	type field struct {
		name      string
		got, want any
	}
	times := []struct {
		name      string
		got, want time.Time
	}{
		{"CreatedAt", got.CreatedAt, want.CreatedAt}, {"StartedAt", got.StartedAt, want.StartedAt},
		{"ExpiresAt", got.ExpiresAt, want.ExpiresAt}, {"EndedAt", got.EndedAt, want.EndedAt},
	}
	for _, tm := range times {
		if !tm.got.Equal(tm.want) {
			return fmt.Errorf("%s = %v, want %v", tm.name, tm.got, tm.want)
		}
	}
	if !maps.Equal(got.Env, want.Env) {
		return fmt.Errorf("Env = %v, want %v", got.Env, want.Env)
	}
	if !maps.Equal(got.Metadata, want.Metadata) {
		return fmt.Errorf("Metadata = %v, want %v", got.Metadata, want.Metadata)
	}
	if string(got.Handle) != string(want.Handle) {
		return fmt.Errorf("Handle = %s, want %s", got.Handle, want.Handle)
	}
	for _, f := range []field{
		{"ID", got.ID, want.ID}, {"Template", got.Template, want.Template}, {"State", got.State, want.State},
		{"Owner", got.Owner, want.Owner}, {"Backend", got.Backend, want.Backend},
		{"CPUMillis", got.CPUMillis, want.CPUMillis}, {"MemoryMB", got.MemoryMB, want.MemoryMB},
		{"DiskMB", got.DiskMB, want.DiskMB}, {"User", got.User, want.User}, {"Workdir", got.Workdir, want.Workdir},
		{"EndReason", got.EndReason, want.EndReason}, {"EnvdKey", got.EnvdKey, want.EnvdKey},
		{"Name", got.Name, want.Name},
	} {
		if f.got != f.want {
			return fmt.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	return nil
}

func testSandboxCRUD(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-owner")
	sb := newSandbox("sb-1", "pr-owner", base)
	sb.Handle = json.RawMessage(`{"version":1,"pid":42}`)
	mustCreate(t, s, sb)

	got, err := s.GetSandbox(ctx(t), "sb-1")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if err := sameSandbox(got, sb); err != nil {
		t.Errorf("round trip: %v", err)
	}
	if !got.StartedAt.IsZero() || !got.EndedAt.IsZero() {
		t.Errorf("unset times came back set: started %v ended %v", got.StartedAt, got.EndedAt)
	}

	// A sandbox with nothing optional set.
	bare := store.Sandbox{ID: "sb-bare", Owner: "pr-owner", State: "starting", CreatedAt: base}
	mustCreate(t, s, bare)
	got, err = s.GetSandbox(ctx(t), "sb-bare")
	if err != nil {
		t.Fatalf("GetSandbox(bare): %v", err)
	}
	if err := sameSandbox(got, bare); err != nil {
		t.Errorf("bare round trip: %v", err)
	}
	if got.Handle != nil {
		t.Errorf("bare Handle = %q, want nil", got.Handle)
	}

	if err := s.CreateSandbox(ctx(t), sb); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate CreateSandbox: got %v, want ErrConflict", err)
	}
	other := newSandbox("sb-2", "pr-nobody", base)
	if err := s.CreateSandbox(ctx(t), other); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateSandbox with unknown owner: got %v, want ErrNotFound", err)
	}
	if err := s.CreateSandbox(ctx(t), store.Sandbox{ID: "sb-3", Owner: "pr-owner"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateSandbox without created_at: got %v, want ErrInvalid", err)
	}
	if _, err := s.GetSandbox(ctx(t), "sb-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandbox(missing): got %v, want ErrNotFound", err)
	}

	if err := s.DeleteSandbox(ctx(t), "sb-1"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if _, err := s.GetSandbox(ctx(t), "sb-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandbox after delete: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteSandbox(ctx(t), "sb-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteSandbox: got %v, want ErrNotFound", err)
	}
	// The ID is free again and the old metadata is gone with the row.
	mustCreate(t, s, newSandbox("sb-1", "pr-owner", base))
}

func testSandboxUpdate(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustPrincipal(t, s, "pr-b")
	mustCreate(t, s, newSandbox("sb-1", "pr-a", base))

	started := base.Add(time.Second)
	got, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error {
		if sb.State != "starting" {
			return fmt.Errorf("state %s: %w", sb.State, store.ErrConflict)
		}
		sb.State = "running"
		sb.StartedAt = started
		sb.Handle = json.RawMessage(`{"v":1}`)
		sb.Metadata["phase"] = "two"
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSandbox: %v", err)
	}
	if got.State != "running" || !got.StartedAt.Equal(started) {
		t.Errorf("returned %s started %v, want running started %v", got.State, got.StartedAt, started)
	}
	stored, err := s.GetSandbox(ctx(t), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sameSandbox(stored, got); err != nil {
		t.Errorf("stored differs from returned: %v", err)
	}

	// The new metadata is filterable and the old pair still is too.
	list, _, err := s.ListSandboxes(ctx(t), store.SandboxFilter{Metadata: map[string]string{"phase": "two", "team": "infra"}})
	if err != nil || len(list) != 1 {
		t.Errorf("filter on updated metadata: %d results, %v; want 1", len(list), err)
	}

	// A failing callback writes nothing and its error comes back.
	_, err = s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error {
		sb.State = "stopped"
		if sb.State != "starting" {
			return fmt.Errorf("want starting: %w", store.ErrConflict)
		}
		return nil
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("rejected transition: got %v, want ErrConflict", err)
	}
	stored, _ = s.GetSandbox(ctx(t), "sb-1")
	if stored.State != "running" {
		t.Errorf("state after rejected update = %s, want running", stored.State)
	}

	if _, err := s.UpdateSandbox(ctx(t), "sb-missing", func(*store.Sandbox) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSandbox(missing): got %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error { sb.ID = "sb-x"; return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("UpdateSandbox changing ID: got %v, want ErrInvalid", err)
	}
	if _, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error { sb.Owner = "pr-nobody"; return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSandbox to unknown owner: got %v, want ErrNotFound", err)
	}

	// Removing metadata removes it from filters; ending sets terminal fields.
	ended := base.Add(time.Minute)
	if _, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error {
		sb.Metadata = nil
		sb.State, sb.EndedAt, sb.EndReason = "stopped", ended, "deleted by user"
		sb.Owner = "pr-b"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	list, _, err = s.ListSandboxes(ctx(t), store.SandboxFilter{Metadata: map[string]string{"team": "infra"}})
	if err != nil || len(list) != 0 {
		t.Errorf("filter after metadata removal: %d results, %v; want 0", len(list), err)
	}
	stored, _ = s.GetSandbox(ctx(t), "sb-1")
	if stored.State != "stopped" || !stored.EndedAt.Equal(ended) || stored.EndReason != "deleted by user" || stored.Owner != "pr-b" || len(stored.Metadata) != 0 {
		t.Errorf("after end: %+v", stored)
	}
}

// testSandboxConcurrentUpdates increments a counter from many goroutines;
// any lost update shows as a smaller total.
func testSandboxConcurrentUpdates(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	sb := newSandbox("sb-1", "pr-a", base)
	sb.CPUMillis = 0
	mustCreate(t, s, sb)

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error {
					sb.CPUMillis++
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	// Readers run alongside the writers.
	wg.Go(func() {
		for range 50 {
			if _, err := s.GetSandbox(ctx(t), "sb-1"); err != nil {
				errs <- err
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent update: %v", err)
	}
	got, err := s.GetSandbox(ctx(t), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.CPUMillis != workers*each {
		t.Errorf("counter = %d, want %d (lost updates)", got.CPUMillis, workers*each)
	}
}

// testSandboxConcurrentTransition races one transition; exactly one caller
// may win, the others see the new state and get ErrConflict.
func testSandboxConcurrentTransition(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustCreate(t, s, newSandbox("sb-1", "pr-a", base))
	const n = 16
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		wins      int
		conflicts int
	)
	for i := range n {
		wg.Go(func() {
			_, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error {
				if sb.State != "starting" {
					return fmt.Errorf("state %s: %w", sb.State, store.ErrConflict)
				}
				sb.State = "running"
				sb.EndReason = fmt.Sprint("winner ", i)
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Errorf("transition: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || conflicts != n-1 {
		t.Errorf("wins %d conflicts %d, want 1 and %d", wins, conflicts, n-1)
	}
}

func testListPagination(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustPrincipal(t, s, "pr-b")
	const total = 230
	var want []store.Sandbox
	for i := range total {
		// Groups of three share a created_at so the ID tie-break matters.
		created := base.Add(time.Duration(i/3) * time.Millisecond)
		owner := "pr-a"
		if i%2 == 1 {
			owner = "pr-b"
		}
		sb := newSandbox(fmt.Sprintf("sb-%04d", (i*7919)%10000), owner, created)
		mustCreate(t, s, sb)
		want = append(want, sb)
	}
	slices.SortFunc(want, func(a, b store.Sandbox) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return -cmpString(a.ID, b.ID)
	})

	var got []string
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		page, next, err := s.ListSandboxes(ctx(t), store.SandboxFilter{Limit: 40, PageToken: token})
		if err != nil {
			t.Fatalf("ListSandboxes page %d: %v", pages, err)
		}
		pages++
		if len(page) > 40 {
			t.Fatalf("page %d has %d items, limit 40", pages, len(page))
		}
		for _, sb := range page {
			if seen[sb.ID] {
				t.Fatalf("duplicate %s on page %d", sb.ID, pages)
			}
			seen[sb.ID] = true
			got = append(got, sb.ID)
		}
		// A sandbox created between pages, newer than everything, must not
		// disturb the pages still to come.
		if pages == 2 {
			mustCreate(t, s, newSandbox("sb-late", "pr-a", base.Add(time.Hour)))
		}
		if next == "" {
			break
		}
		if pages > total {
			t.Fatal("pagination does not terminate")
		}
		token = next
	}
	if pages != 6 {
		t.Errorf("pages = %d, want 6 (230 items, 40 per page)", pages)
	}
	if len(got) != total {
		t.Fatalf("listed %d sandboxes, want %d", len(got), total)
	}
	for i := range want {
		if got[i] != want[i].ID {
			t.Fatalf("position %d: got %s, want %s (order created_at desc, id desc)", i, got[i], want[i].ID)
		}
	}

	// Default and maximum limits.
	page, next, err := s.ListSandboxes(ctx(t), store.SandboxFilter{})
	if err != nil || len(page) != store.DefaultPageSize || next == "" {
		t.Errorf("default limit: %d items, next %q, %v; want %d and a token", len(page), next, err, store.DefaultPageSize)
	}
	page, next, err = s.ListSandboxes(ctx(t), store.SandboxFilter{Limit: store.MaxPageSize * 10})
	if err != nil || len(page) != total+1 || next != "" {
		t.Errorf("huge limit: %d items, next %q, %v; want %d and no token", len(page), next, err, total+1)
	}
	// Exactly one full page leaves no token.
	page, next, err = s.ListSandboxes(ctx(t), store.SandboxFilter{Owner: "pr-a", Limit: total/2 + 1})
	if err != nil || len(page) != total/2+1 || next != "" {
		t.Errorf("exact page: %d items, next %q, %v; want %d and no token", len(page), next, err, total/2+1)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func testListFilters(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustPrincipal(t, s, "pr-b")
	type spec struct {
		id, owner, state string
		md               map[string]string
	}
	specs := []spec{
		{"sb-1", "pr-a", "running", map[string]string{"env": "prod", "team": "infra"}},
		{"sb-2", "pr-a", "stopped", map[string]string{"env": "prod", "team": "web"}},
		{"sb-3", "pr-b", "running", map[string]string{"env": "dev", "team": "infra"}},
		{"sb-4", "pr-b", "paused", map[string]string{"env": "prod"}},
		{"sb-5", "pr-a", "running", nil},
		{"sb-6", "pr-a", "running", map[string]string{"env": "prod", "team": "infra", "k:with,odd=chars": "v \"q\""}},
	}
	for i, sp := range specs {
		sb := newSandbox(sp.id, sp.owner, base.Add(time.Duration(i)*time.Second))
		sb.State, sb.Metadata = sp.state, sp.md
		mustCreate(t, s, sb)
	}
	cases := []struct {
		name string
		f    store.SandboxFilter
		want []string // in list order
	}{
		{"all", store.SandboxFilter{}, []string{"sb-6", "sb-5", "sb-4", "sb-3", "sb-2", "sb-1"}},
		{"owner", store.SandboxFilter{Owner: "pr-b"}, []string{"sb-4", "sb-3"}},
		{"one state", store.SandboxFilter{States: []string{"running"}}, []string{"sb-6", "sb-5", "sb-3", "sb-1"}},
		{"two states", store.SandboxFilter{States: []string{"paused", "stopped"}}, []string{"sb-4", "sb-2"}},
		{"unknown state", store.SandboxFilter{States: []string{"nope"}}, nil},
		{"one pair", store.SandboxFilter{Metadata: map[string]string{"env": "prod"}}, []string{"sb-6", "sb-4", "sb-2", "sb-1"}},
		{"all pairs must match", store.SandboxFilter{Metadata: map[string]string{"env": "prod", "team": "infra"}}, []string{"sb-6", "sb-1"}},
		{"value mismatch", store.SandboxFilter{Metadata: map[string]string{"env": "staging"}}, nil},
		{"odd characters", store.SandboxFilter{Metadata: map[string]string{"k:with,odd=chars": "v \"q\""}}, []string{"sb-6"}},
		{"combined", store.SandboxFilter{Owner: "pr-a", States: []string{"running"}, Metadata: map[string]string{"team": "infra"}}, []string{"sb-6", "sb-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := listAll(t, s, c.f, 1) // one per page exercises tokens with filters
			if !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func listAll(t *testing.T, s store.Store, f store.SandboxFilter, limit int) []string {
	t.Helper()
	var ids []string
	f.Limit = limit
	for i := 0; ; i++ {
		page, next, err := s.ListSandboxes(ctx(t), f)
		if err != nil {
			t.Fatalf("ListSandboxes: %v", err)
		}
		for _, sb := range page {
			ids = append(ids, sb.ID)
		}
		if next == "" {
			return ids
		}
		if i > 1000 {
			t.Fatal("pagination does not terminate")
		}
		f.PageToken = next
	}
}

func testListInvalidToken(t *testing.T, s store.Store) {
	for _, tok := range []string{"garbage!", "AAAA", "djEueC55"} {
		if _, _, err := s.ListSandboxes(ctx(t), store.SandboxFilter{PageToken: tok}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("token %q: got %v, want ErrInvalid", tok, err)
		}
	}
}

func testPrincipals(t *testing.T, s store.Store) {
	if n, err := s.CountPrincipals(ctx(t)); err != nil || n != 0 {
		t.Fatalf("CountPrincipals on empty store = %d, %v", n, err)
	}
	admin := store.Principal{ID: "pr-admin", Kind: store.PrincipalUser, Name: "admin", CreatedAt: base}
	if err := s.CreatePrincipal(ctx(t), admin); err != nil {
		t.Fatal(err)
	}
	bot := store.Principal{ID: "pr-bot", Kind: store.PrincipalAgent, Name: "ci-bot", CreatedBy: "pr-admin", CreatedAt: base.Add(time.Second)}
	if err := s.CreatePrincipal(ctx(t), bot); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetPrincipal(ctx(t), "pr-bot")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != bot.ID || got.Kind != bot.Kind || got.Name != bot.Name || got.CreatedBy != bot.CreatedBy || !got.CreatedAt.Equal(bot.CreatedAt) {
		t.Errorf("GetPrincipal = %+v, want %+v", got, bot)
	}
	if got, _ := s.GetPrincipal(ctx(t), "pr-admin"); got.CreatedBy != "" {
		t.Errorf("admin CreatedBy = %q, want empty", got.CreatedBy)
	}
	if _, err := s.GetPrincipal(ctx(t), "pr-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPrincipal(missing): got %v, want ErrNotFound", err)
	}
	if err := s.CreatePrincipal(ctx(t), admin); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate principal: got %v, want ErrConflict", err)
	}
	orphan := store.Principal{ID: "pr-x", Kind: store.PrincipalAgent, Name: "x", CreatedBy: "pr-ghost", CreatedAt: base}
	if err := s.CreatePrincipal(ctx(t), orphan); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("principal created by unknown: got %v, want ErrNotFound", err)
	}
	badKind := store.Principal{ID: "pr-y", Kind: "robot", Name: "y", CreatedAt: base}
	if err := s.CreatePrincipal(ctx(t), badKind); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("principal with bad kind: got %v, want ErrInvalid", err)
	}
	list, err := s.ListPrincipals(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "pr-admin" || list[1].ID != "pr-bot" {
		t.Errorf("ListPrincipals = %+v", list)
	}
	if n, err := s.CountPrincipals(ctx(t)); err != nil || n != 2 {
		t.Errorf("CountPrincipals = %d, %v; want 2", n, err)
	}
}

func newKey(id, principal string, created time.Time) store.APIKey {
	return store.APIKey{
		ID: id, PrincipalID: principal, Name: "key " + id, Prefix: "wdn_" + id,
		Hash: fmt.Sprintf("%064x", created.UnixNano()), Scopes: []string{"sandboxes:create", "sandboxes:read"},
		CreatedAt: created,
	}
}

func testPrincipalWithKeysAtomic(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	if err := s.CreateKey(ctx(t), newKey("k0000001", "pr-a", base)); err != nil {
		t.Fatal(err)
	}
	p := store.Principal{ID: "pr-new", Kind: store.PrincipalUser, Name: "new", CreatedAt: base}
	// The second key's ID is taken, so nothing may be stored.
	err := s.CreatePrincipal(ctx(t), p, newKey("k0000002", "pr-new", base), newKey("k0000001", "pr-new", base))
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreatePrincipal with a conflicting key: got %v, want ErrConflict", err)
	}
	if _, err := s.GetPrincipal(ctx(t), "pr-new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("principal stored despite failed key: %v", err)
	}
	if _, err := s.GetKeyByID(ctx(t), "k0000002"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("first key stored despite failure: %v", err)
	}
	// Keys must belong to the principal being created.
	if err := s.CreatePrincipal(ctx(t), p, newKey("k0000003", "pr-a", base)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("key of another principal: got %v, want ErrInvalid", err)
	}
	if err := s.CreatePrincipal(ctx(t), p, newKey("k0000002", "pr-new", base)); err != nil {
		t.Fatalf("CreatePrincipal with key: %v", err)
	}
	if k, err := s.GetKeyByID(ctx(t), "k0000002"); err != nil || k.PrincipalID != "pr-new" {
		t.Errorf("key after CreatePrincipal: %+v, %v", k, err)
	}
}

func testKeys(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustPrincipal(t, s, "pr-b")
	k1 := newKey("aaaaaaaa", "pr-a", base)
	k2 := newKey("bbbbbbbb", "pr-b", base.Add(time.Second))
	k3 := newKey("cccccccc", "pr-a", base.Add(2*time.Second))
	k3.Scopes = nil
	for _, k := range []store.APIKey{k1, k2, k3} {
		if err := s.CreateKey(ctx(t), k); err != nil {
			t.Fatalf("CreateKey(%s): %v", k.ID, err)
		}
	}
	if err := s.CreateKey(ctx(t), k1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate key: got %v, want ErrConflict", err)
	}
	if err := s.CreateKey(ctx(t), newKey("dddddddd", "pr-ghost", base)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("key for unknown principal: got %v, want ErrNotFound", err)
	}

	got, err := s.GetKeyByID(ctx(t), "aaaaaaaa")
	if err != nil {
		t.Fatal(err)
	}
	if got.PrincipalID != k1.PrincipalID || got.Name != k1.Name || got.Prefix != k1.Prefix || got.Hash != k1.Hash ||
		!slices.Equal(got.Scopes, k1.Scopes) || !got.CreatedAt.Equal(k1.CreatedAt) || !got.RevokedAt.IsZero() || !got.LastUsedAt.IsZero() {
		t.Errorf("GetKeyByID = %+v, want %+v", got, k1)
	}
	if got, _ := s.GetKeyByID(ctx(t), "cccccccc"); len(got.Scopes) != 0 {
		t.Errorf("nil scopes came back as %v", got.Scopes)
	}
	if _, err := s.GetKeyByID(ctx(t), "zzzzzzzz"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKeyByID(missing): got %v, want ErrNotFound", err)
	}

	ids := func(ks []store.APIKey) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	all, err := s.ListKeys(ctx(t), "")
	if err != nil || !slices.Equal(ids(all), []string{"aaaaaaaa", "bbbbbbbb", "cccccccc"}) {
		t.Errorf("ListKeys(all) = %v, %v", ids(all), err)
	}
	mine, err := s.ListKeys(ctx(t), "pr-a")
	if err != nil || !slices.Equal(ids(mine), []string{"aaaaaaaa", "cccccccc"}) {
		t.Errorf("ListKeys(pr-a) = %v, %v", ids(mine), err)
	}

	// Touch only moves forward.
	used := base.Add(time.Hour)
	if err := s.TouchKey(ctx(t), "aaaaaaaa", used); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchKey(ctx(t), "aaaaaaaa", used.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetKeyByID(ctx(t), "aaaaaaaa"); !got.LastUsedAt.Equal(used) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, used)
	}

	revoked := base.Add(2 * time.Hour)
	rk, err := s.RevokeKey(ctx(t), "aaaaaaaa", revoked)
	if err != nil {
		t.Fatal(err)
	}
	if !rk.RevokedAt.Equal(revoked) {
		t.Errorf("RevokeKey returned RevokedAt %v, want %v", rk.RevokedAt, revoked)
	}
	rk, err = s.RevokeKey(ctx(t), "aaaaaaaa", revoked.Add(time.Hour))
	if err != nil || !rk.RevokedAt.Equal(revoked) {
		t.Errorf("second RevokeKey: RevokedAt %v, %v; want first time %v kept", rk.RevokedAt, err, revoked)
	}
	if got, _ := s.GetKeyByID(ctx(t), "aaaaaaaa"); !got.RevokedAt.Equal(revoked) {
		t.Errorf("stored RevokedAt = %v, want %v", got.RevokedAt, revoked)
	}
	if _, err := s.RevokeKey(ctx(t), "zzzzzzzz", revoked); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey(missing): got %v, want ErrNotFound", err)
	}
}

func auditEvent(seq int64) store.AuditEvent {
	target := "sb-even"
	if seq%2 == 1 {
		target = "sb-odd"
	}
	return store.AuditEvent{
		Seq: seq, Time: base.Add(time.Duration(seq) * time.Millisecond), RequestID: fmt.Sprint("req-", seq),
		PrincipalID: fmt.Sprint("pr-", seq%3), Action: "sandbox.create", Target: target, Outcome: "success",
		Detail:   json.RawMessage(fmt.Sprintf(`{"n":%d,"s":"x y"}`, seq)),
		PrevHash: fmt.Sprintf("%064x", seq-1), Hash: fmt.Sprintf("%064x", seq),
	}
}

func testAudit(t *testing.T, s store.Store) {
	if _, err := s.LastAudit(ctx(t)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LastAudit on empty log: got %v, want ErrNotFound", err)
	}
	for seq := int64(1); seq <= 30; seq++ {
		if err := s.AppendAudit(ctx(t), auditEvent(seq)); err != nil {
			t.Fatalf("AppendAudit(%d): %v", seq, err)
		}
	}
	if err := s.AppendAudit(ctx(t), auditEvent(7)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate seq: got %v, want ErrConflict", err)
	}
	last, err := s.LastAudit(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := auditEvent(30)
	if last.Seq != 30 || !last.Time.Equal(want.Time) || last.RequestID != want.RequestID || last.PrincipalID != want.PrincipalID ||
		last.Action != want.Action || last.Target != want.Target || last.Outcome != want.Outcome ||
		string(last.Detail) != string(want.Detail) || last.PrevHash != want.PrevHash || last.Hash != want.Hash {
		t.Errorf("LastAudit = %+v, want %+v", last, want)
	}

	seqs := func(es []store.AuditEvent) []int64 {
		var out []int64
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	got, err := s.ListAudit(ctx(t), store.AuditFilter{After: 25})
	if err != nil || !slices.Equal(seqs(got), []int64{26, 27, 28, 29, 30}) {
		t.Errorf("ListAudit(after 25) = %v, %v", seqs(got), err)
	}
	got, err = s.ListAudit(ctx(t), store.AuditFilter{After: 2, Limit: 3})
	if err != nil || !slices.Equal(seqs(got), []int64{3, 4, 5}) {
		t.Errorf("ListAudit(after 2, limit 3) = %v, %v", seqs(got), err)
	}
	got, err = s.ListAudit(ctx(t), store.AuditFilter{Target: "sb-odd", PrincipalID: "pr-0", Limit: 100})
	if err != nil || !slices.Equal(seqs(got), []int64{3, 9, 15, 21, 27}) {
		t.Errorf("ListAudit(target, principal) = %v, %v", seqs(got), err)
	}
	got, err = s.ListAudit(ctx(t), store.AuditFilter{Action: "sandbox.delete"})
	if err != nil || len(got) != 0 {
		t.Errorf("ListAudit(other action) = %v, %v", seqs(got), err)
	}
}

func testAuditWalk(t *testing.T, s store.Store) {
	const n = 120
	// Append out of order; the walk must still be in seq order.
	var order []int64
	for i := int64(n); i > n/2; i-- {
		order = append(order, i)
	}
	for i := int64(1); i <= n/2; i++ {
		order = append(order, i)
	}
	for _, seq := range order {
		if err := s.AppendAudit(ctx(t), auditEvent(seq)); err != nil {
			t.Fatal(err)
		}
	}
	var walked []int64
	if err := s.WalkAudit(ctx(t), func(e store.AuditEvent) error {
		walked = append(walked, e.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(walked) != n || !slices.IsSorted(walked) || walked[0] != 1 {
		t.Errorf("walk visited %d events, sorted %v", len(walked), slices.IsSorted(walked))
	}
	stop := errors.New("stop")
	count := 0
	err := s.WalkAudit(ctx(t), func(store.AuditEvent) error {
		count++
		if count == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || count != 10 {
		t.Errorf("early stop: err %v after %d events, want stop after 10", err, count)
	}
}
