package sandbox

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

// deletingBackend is fakeBackend whose Delete takes the sandbox's usage
// away, as the removal of its cgroup does.
type deletingBackend struct{ *fakeBackend }

func (d deletingBackend) Delete(_ context.Context, h backend.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.usage, h.ID)
	return nil
}

type hookLog struct {
	mu       sync.Mutex
	observed []Reading
	finals   []bool
	changed  []string
}

func (h *hookLog) Observe(r Reading, final bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observed = append(h.observed, r)
	h.finals = append(h.finals, final)
}

func (h *hookLog) Changed(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changed = append(h.changed, id)
}

// TestUsageHook: the manager tells the usage hook of pauses and resumes,
// and hands it a sandbox's final reading before the backend deletes it
// (while its counters can still be read); Readings lists the running and
// paused sandboxes it holds with their counters.
func TestUsageHook(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreatePrincipal(context.Background(), store.Principal{ID: "p-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{usage: map[string]backend.Usage{}, events: make(chan backend.Event, 1)}
	hook := &hookLog{}
	m := New(Config{Usage: hook}, st, deletingBackend{fb}, noTemplates{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := t.Context()
	addLive(t, m, st, "sb-a", StateRunning)
	addLive(t, m, st, "sb-b", StateRunning)
	addLive(t, m, st, "sb-gone", StateStopped)
	fb.usage["h-sb-a"] = backend.Usage{CPUNanos: 7e9, MemoryBytes: 1 << 20}
	fb.usage["h-sb-b"] = backend.Usage{CPUNanos: 1e9}

	if _, err := m.Pause(ctx, "sb-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, "sb-b"); err != nil {
		t.Fatal(err)
	}
	fb.pauseErr = backend.ErrUnsupported
	if _, err := m.Pause(ctx, "sb-b"); err == nil {
		t.Fatal("the failing pause succeeded")
	}
	hook.mu.Lock()
	if len(hook.changed) != 2 || hook.changed[0] != "sb-b" || hook.changed[1] != "sb-b" {
		t.Errorf("changed %v, want the pause and the resume of sb-b (not the failed pause)", hook.changed)
	}
	hook.mu.Unlock()

	rs, err := m.Readings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Reading{}
	for _, r := range rs {
		got[r.ID] = r
	}
	if len(got) != 2 || !got["sb-a"].HasUsage || got["sb-a"].Usage.CPUNanos != 7e9 || got["sb-a"].Owner != "p-1" ||
		got["sb-a"].State != StateRunning || got["sb-a"].At.IsZero() {
		t.Fatalf("readings %+v", rs)
	}

	if err := m.Kill(ctx, "sb-a", "test"); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.observed) != 1 || !hook.finals[0] {
		t.Fatalf("observed %+v finals %v, want one final reading", hook.observed, hook.finals)
	}
	r := hook.observed[0]
	if r.ID != "sb-a" || !r.HasUsage || r.Usage.CPUNanos != 7e9 || r.Owner != "p-1" || r.Template != "base" || r.At.IsZero() {
		t.Fatalf("final reading %+v: taken after the backend deleted the sandbox?", r)
	}
	if sb, _ := m.Get(ctx, "sb-a"); State(sb.State) != StateStopped || time.Since(sb.EndedAt) > time.Minute {
		t.Fatalf("sb-a after the kill: %+v", sb)
	}
}
