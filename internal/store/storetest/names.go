package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// testSandboxNames checks sandbox names: stored and returned, filtered on,
// unique per owner among live sandboxes (ErrNameInUse, which is an
// ErrConflict), free again once the sandbox holding one has ended, and
// free for other owners.
func testSandboxNames(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "pr-a")
	mustPrincipal(t, s, "pr-b")
	named := func(id, owner, name string, i int) store.Sandbox {
		sb := newSandbox(id, owner, base.Add(time.Duration(i)*time.Second))
		sb.Name = name
		return sb
	}
	first := named("sb-1", "pr-a", "web", 1)
	mustCreate(t, s, first)
	got, err := s.GetSandbox(ctx(t), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sameSandbox(got, first); err != nil {
		t.Fatalf("round trip: %v", err)
	}

	// The same name for the same owner while the first is live.
	for _, state := range []string{"starting", "running", "paused", "stopping"} {
		if _, err := s.UpdateSandbox(ctx(t), "sb-1", func(sb *store.Sandbox) error { sb.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
		err := s.CreateSandbox(ctx(t), named("sb-dup-"+state, "pr-a", "web", 2))
		if !errors.Is(err, store.ErrNameInUse) || !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second live %q while the first is %s: err = %v, want ErrNameInUse (an ErrConflict)", "web", state, err)
		}
		if _, err := s.GetSandbox(ctx(t), "sb-dup-"+state); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused sandbox was stored: %v", err)
		}
	}
	// Another owner may use it; unnamed sandboxes never collide.
	mustCreate(t, s, named("sb-2", "pr-b", "web", 3))
	mustCreate(t, s, named("sb-3", "pr-a", "", 4))
	mustCreate(t, s, named("sb-4", "pr-a", "", 5))

	// A rename onto a live name is refused too.
	_, err = s.UpdateSandbox(ctx(t), "sb-3", func(sb *store.Sandbox) error { sb.Name = "web"; return nil })
	if !errors.Is(err, store.ErrNameInUse) {
		t.Fatalf("update onto a live name: err = %v, want ErrNameInUse", err)
	}

	// Filter by name (and owner, and state).
	ids := func(f store.SandboxFilter) []string {
		sbs, _, err := s.ListSandboxes(ctx(t), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range sbs {
			out = append(out, sb.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(store.SandboxFilter{Name: "web"}); !slices.Equal(got, []string{"sb-1", "sb-2"}) {
		t.Errorf("name web: %v, want [sb-1 sb-2]", got)
	}
	if got := ids(store.SandboxFilter{Name: "web", Owner: "pr-b"}); !slices.Equal(got, []string{"sb-2"}) {
		t.Errorf("name web of pr-b: %v, want [sb-2]", got)
	}

	// Once ended, the name is free again, and both records keep it.
	for i, end := range []string{"stopped", "failed", "lost"} {
		live := "sb-1"
		if i > 0 {
			live = fmt.Sprintf("sb-again-%d", i-1)
		}
		if _, err := s.UpdateSandbox(ctx(t), live, func(sb *store.Sandbox) error { sb.State = end; return nil }); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, named(fmt.Sprintf("sb-again-%d", i), "pr-a", "web", 10+i))
	}
	if got := ids(store.SandboxFilter{Name: "web", Owner: "pr-a"}); len(got) != 4 {
		t.Errorf("pr-a's sandboxes named web: %v, want 4 (3 ended, 1 live)", got)
	}
	if got := ids(store.SandboxFilter{Name: "web", Owner: "pr-a", States: []string{"starting", "running"}}); !slices.Equal(got, []string{"sb-again-2"}) {
		t.Errorf("pr-a's live sandboxes named web: %v, want [sb-again-2]", got)
	}

	// Racing creates of one name: exactly one wins.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		won   int
		other []error
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.CreateSandbox(ctx(t), named(fmt.Sprintf("sb-race-%d", i), "pr-b", "race", 20+i))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if !errors.Is(err, store.ErrNameInUse) {
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || len(other) > 0 {
		t.Errorf("8 racing creates of one name: %d succeeded, other errors %v; want exactly 1 and none", won, other)
	}
}
