package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

// nameBackend boots sandboxes that do nothing: enough for the manager's
// create, kill, pause and resume paths. What it does not implement is left
// to the nil embedded interface.
type nameBackend struct {
	backend.Backend
	mu    sync.Mutex
	ended map[string]chan struct{}
}

func (b *nameBackend) ID() string                         { return "names" }
func (b *nameBackend) Capabilities() backend.Capabilities { return backend.Capabilities{Pause: true} }
func (b *nameBackend) Create(_ context.Context, s backend.Spec) (backend.Handle, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended[s.ID] = make(chan struct{})
	return backend.Handle{Version: 1, Backend: b.ID(), ID: s.ID}, nil
}
func (b *nameBackend) Start(_ context.Context, h backend.Handle) (backend.Handle, error) {
	return h, nil
}
func (b *nameBackend) Wait(ctx context.Context, h backend.Handle) (backend.ExitStatus, error) {
	b.mu.Lock()
	ch := b.ended[h.ID]
	b.mu.Unlock()
	select {
	case <-ch:
		return backend.ExitStatus{Reason: "deleted"}, nil
	case <-ctx.Done():
		return backend.ExitStatus{}, ctx.Err()
	}
}
func (b *nameBackend) Delete(_ context.Context, h backend.Handle) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.ended[h.ID]; ok {
		close(ch)
		delete(b.ended, h.ID)
	}
	return nil
}
func (b *nameBackend) Pause(context.Context, backend.Handle) error  { return nil }
func (b *nameBackend) Resume(context.Context, backend.Handle) error { return nil }

type oneTemplate struct{}

func (oneTemplate) Get(name string) (*template.Template, error) {
	if name != template.BaseName {
		return nil, template.ErrUnknown
	}
	return &template.Template{Name: template.BaseName, ID: "base:test", User: "user", Workdir: "/home/user"}, nil
}

// barrierTemplates is oneTemplate whose Get, which create calls after its
// name check and before it records the sandbox, waits until n calls have
// arrived: n creates of one name all pass the check before any records.
type barrierTemplates struct {
	oneTemplate
	wg *sync.WaitGroup
}

func (b barrierTemplates) Get(name string) (*template.Template, error) {
	b.wg.Done()
	b.wg.Wait()
	return b.oneTemplate.Get(name)
}

func newNamesManager(t *testing.T) (*Manager, store.Store) {
	t.Helper()
	return newNamesManagerWith(t, oneTemplate{})
}

func newNamesManagerWith(t *testing.T, tmpl Templates) (*Manager, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, p := range []string{"p-1", "p-2"} {
		if err := st.CreatePrincipal(context.Background(), store.Principal{ID: p, Kind: store.PrincipalUser, Name: p, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	m := New(Config{}, st, &nameBackend{ended: map[string]chan struct{}{}}, tmpl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(m.Shutdown)
	return m, st
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "web", "my-app-2", "0", "9lives", strings.Repeat("a", MaxName), "sb", "sbx-1", "s-b"} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "sb-1", "sb-abcdefghijklmnop", "Web", "-a", "a-", "a_b", "a.b", "a b", "é", strings.Repeat("a", MaxName+1), "a\x00"} {
		err := ValidName(bad)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalid", bad, err)
		} else if !strings.Contains(err.Error(), "name") {
			t.Errorf("ValidName(%q) = %v: does not say it is about the name", bad, err)
		}
	}
	// Every id the manager makes is an id, never a valid name.
	for range 100 {
		id := NewID()
		if !IsID(id) || ValidName(id) == nil {
			t.Fatalf("id %s: IsID %v, ValidName %v", id, IsID(id), ValidName(id))
		}
	}
}

func TestCreateNameUniquePerOwnerAmongLive(t *testing.T) {
	m, st := newNamesManager(t)
	ctx := t.Context()
	first, err := m.Create(ctx, CreateRequest{Owner: "p-1", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Name != "web" {
		t.Fatalf("created sandbox's name = %q, want web", first.Name)
	}
	if got, err := m.Get(ctx, first.ID); err != nil || got.Name != "web" {
		t.Fatalf("stored name = %q, %v; want web", got.Name, err)
	}

	// A second live one of the same owner: refused before anything boots.
	_, err = m.Create(ctx, CreateRequest{Owner: "p-1", Name: "web"})
	var nt *NameTakenError
	if !errors.As(err, &nt) || !errors.Is(err, store.ErrConflict) || nt.ID != first.ID {
		t.Fatalf("second create of web: err = %v, want a NameTakenError naming %s (a store.ErrConflict)", err, first.ID)
	}
	all, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "p-1"})
	if err != nil || len(all) != 1 {
		t.Fatalf("p-1 has %d sandboxes after the refused create (%v), want 1", len(all), err)
	}

	// Paused still holds the name.
	if _, err := m.Pause(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateRequest{Owner: "p-1", Name: "web"}); !errors.As(err, &nt) {
		t.Fatalf("create of web while the first is paused: err = %v, want NameTakenError", err)
	}

	// Another owner may use it; unnamed sandboxes never collide.
	other, err := m.Create(ctx, CreateRequest{Owner: "p-2", Name: "web"})
	if err != nil {
		t.Fatalf("another owner's web: %v", err)
	}
	for range 2 {
		if _, err := m.Create(ctx, CreateRequest{Owner: "p-1"}); err != nil {
			t.Fatalf("unnamed create: %v", err)
		}
	}

	mine, err := m.LiveByName(ctx, "p-1", "web")
	if err != nil || len(mine) != 1 || mine[0].ID != first.ID {
		t.Fatalf("LiveByName(p-1, web) = %v, %v; want [%s]", ids(mine), err, first.ID)
	}
	everyone, err := m.LiveByName(ctx, "", "web")
	if err != nil || len(everyone) != 2 {
		t.Fatalf("LiveByName(all, web) = %v, %v; want %s and %s", ids(everyone), err, first.ID, other.ID)
	}

	// Once it has ended, the name is free again.
	if err := m.Kill(ctx, first.ID, "killed"); err != nil {
		t.Fatal(err)
	}
	again, err := m.Create(ctx, CreateRequest{Owner: "p-1", Name: "web"})
	if err != nil {
		t.Fatalf("create of web after the first was killed: %v", err)
	}
	if mine, _ := m.LiveByName(ctx, "p-1", "web"); len(mine) != 1 || mine[0].ID != again.ID {
		t.Fatalf("LiveByName(p-1, web) after reuse = %v, want [%s]", ids(mine), again.ID)
	}
	if old, err := m.Get(ctx, first.ID); err != nil || old.Name != "web" {
		t.Fatalf("the ended sandbox's record lost its name: %q, %v", old.Name, err)
	}

	// A malformed name is refused with a validation error naming it.
	for _, bad := range []string{"sb-abc", "Web", "a_b"} {
		if _, err := m.Create(ctx, CreateRequest{Owner: "p-1", Name: bad}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "name") {
			t.Errorf("create with name %q: err = %v, want ErrInvalid about the name", bad, err)
		}
	}
}

// Creates that race for one name pass the manager's check together (the
// barrier holds each after its check until all have passed it); the
// store's unique index lets exactly one through, and the others get the
// same NameTakenError as a check would have given.
func TestCreateNameRace(t *testing.T) {
	const n = 8
	var barrier sync.WaitGroup
	barrier.Add(n)
	m, st := newNamesManagerWith(t, barrierTemplates{wg: &barrier})
	ctx := t.Context()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Create(ctx, CreateRequest{Owner: "p-1", Name: "race"})
			mu.Lock()
			defer mu.Unlock()
			var nt *NameTakenError
			switch {
			case err == nil:
				won++
			case !errors.As(err, &nt):
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || len(errs) > 0 {
		t.Fatalf("%d racing creates of one name: %d succeeded, unexpected errors %v; want 1 and none", n, won, errs)
	}
	live, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "p-1", Name: "race", States: liveStates})
	if err != nil || len(live) != 1 {
		t.Fatalf("live sandboxes named race: %v, %v; want 1", ids(live), err)
	}
}

func TestPauseRecordsPausedAt(t *testing.T) {
	m, _ := newNamesManager(t)
	ctx := t.Context()
	sb, err := m.Create(ctx, CreateRequest{Owner: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	paused, err := m.Pause(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if at := paused.Lifecycle.PausedAt; at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("PausedAt = %v, want about now", at)
	}
	got, err := m.Get(ctx, sb.ID)
	if err != nil || !got.Lifecycle.PausedAt.Equal(paused.Lifecycle.PausedAt) {
		t.Fatalf("stored PausedAt = %v (%v), want %v", got.Lifecycle.PausedAt, err, paused.Lifecycle.PausedAt)
	}
	resumed, err := m.Resume(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Lifecycle.PausedAt.IsZero() {
		t.Fatalf("PausedAt after resume = %v, want zero", resumed.Lifecycle.PausedAt)
	}
}

func ids(sbs []store.Sandbox) string {
	var out []string
	for _, sb := range sbs {
		out = append(out, fmt.Sprintf("%s(%s,%s)", sb.ID, sb.Owner, sb.State))
	}
	return "[" + strings.Join(out, " ") + "]"
}
