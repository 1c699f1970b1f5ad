package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

// stubBackend records what the manager asks of it; its sandboxes "run"
// until deleted. It implements Pauser, Snapshotter and Eventer and declares
// what caps says, so tests can make the two disagree.
type stubBackend struct {
	caps backend.Capabilities

	mu      sync.Mutex
	created int
	deleted map[string]bool
	paused  int
	events  int
	done    map[string]chan struct{}
}

func newStub(caps backend.Capabilities) *stubBackend {
	return &stubBackend{caps: caps, deleted: map[string]bool{}, done: map[string]chan struct{}{}}
}

func (b *stubBackend) doneOf(id string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done[id] == nil {
		b.done[id] = make(chan struct{})
	}
	return b.done[id]
}

func (b *stubBackend) ID() string                         { return "stub" }
func (b *stubBackend) Capabilities() backend.Capabilities { return b.caps }
func (b *stubBackend) Create(_ context.Context, s backend.Spec) (backend.Handle, error) {
	b.mu.Lock()
	b.created++
	b.mu.Unlock()
	return backend.Handle{Version: backend.HandleVersion, Backend: "stub", ID: s.ID}, nil
}
func (b *stubBackend) Start(_ context.Context, h backend.Handle) (backend.Handle, error) {
	return h, nil
}
func (b *stubBackend) Stop(context.Context, backend.Handle, time.Duration) error { return nil }
func (b *stubBackend) Kill(context.Context, backend.Handle) error                { return nil }
func (b *stubBackend) Wait(ctx context.Context, h backend.Handle) (backend.ExitStatus, error) {
	select {
	case <-b.doneOf(h.ID):
		return backend.ExitStatus{Reason: "deleted"}, nil
	case <-ctx.Done():
		return backend.ExitStatus{}, ctx.Err()
	}
}
func (b *stubBackend) Status(context.Context, backend.Handle) (backend.State, error) {
	return backend.StateRunning, nil
}
func (b *stubBackend) Usage(context.Context, backend.Handle) (backend.Usage, error) {
	return backend.Usage{}, nil
}
func (b *stubBackend) DialAgent(context.Context, backend.Handle) (net.Conn, error) {
	return nil, errors.New("no agent")
}
func (b *stubBackend) Recover(context.Context, backend.Handle) error { return nil }
func (b *stubBackend) Delete(_ context.Context, h backend.Handle) error {
	ch := b.doneOf(h.ID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.deleted[h.ID] {
		b.deleted[h.ID] = true
		close(ch)
	}
	return nil
}
func (b *stubBackend) Pause(context.Context, backend.Handle) error {
	b.mu.Lock()
	b.paused++
	b.mu.Unlock()
	return nil
}
func (b *stubBackend) Resume(context.Context, backend.Handle) error { return nil }
func (b *stubBackend) Snapshot(context.Context, backend.Handle) (backend.SnapshotRef, error) {
	return backend.SnapshotRef{}, errors.New("stub snapshots nothing")
}
func (b *stubBackend) StartFrom(_ context.Context, h backend.Handle, _ backend.SnapshotRef) (backend.Handle, error) {
	return h, nil
}
func (b *stubBackend) DeleteSnapshot(context.Context, backend.SnapshotRef) error { return nil }
func (b *stubBackend) Events(context.Context, backend.Handle) (<-chan backend.Event, error) {
	b.mu.Lock()
	b.events++
	b.mu.Unlock()
	return make(chan backend.Event), nil
}

func (b *stubBackend) wasDeleted(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deleted[id]
}

func newStubManager(t *testing.T, cfg Config, caps backend.Capabilities) (*Manager, *stubBackend, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreatePrincipal(context.Background(), store.Principal{ID: "p-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	b := newStub(caps)
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for id, ch := range b.done {
			if !b.deleted[id] {
				b.deleted[id] = true
				close(ch) // end the watchers
			}
		}
	})
	return New(cfg, st, b, noTemplates{}, slog.New(slog.NewTextHandler(io.Discard, nil))), b, st
}

// record stores a sandbox in state with a handle of the stub backend.
func record(t *testing.T, st store.Store, id string, state State) {
	t.Helper()
	now := time.Now().UTC()
	raw, _ := json.Marshal(backend.Handle{Version: backend.HandleVersion, Backend: "stub", ID: id})
	if err := st.CreateSandbox(context.Background(), store.Sandbox{ID: id, Owner: "p-1", Template: "base", State: string(state), Backend: "stub",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Handle: raw}); err != nil {
		t.Fatal(err)
	}
}

func stateOf(t *testing.T, st store.Store, id string) State {
	t.Helper()
	sb, err := st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return State(sb.State)
}

func (m *Manager) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sandboxes)
}

// TestReserveCapacity: places are taken all or none up to MaxSandboxes, and
// given back by drop; re-attached sandboxes count even over the limit.
func TestReserveCapacity(t *testing.T) {
	m, _, _ := newStubManager(t, Config{MaxSandboxes: 2}, backend.Capabilities{})
	if err := m.reserve("sb-a"); err != nil {
		t.Fatal(err)
	}
	if err := m.reserve("sb-b", "sb-c"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("reserving two places with one free: %v, want ErrCapacity", err)
	}
	if m.count() != 1 {
		t.Fatalf("a refused reservation left %d places taken, want 1", m.count())
	}
	if err := m.reserve("sb-b"); err != nil {
		t.Fatal(err)
	}
	if err := m.reserve("sb-c"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("third place: %v, want ErrCapacity", err)
	}
	m.drop("sb-a")
	m.drop("sb-a") // idempotent
	if err := m.reserve("sb-c"); err != nil {
		t.Fatalf("place given back by drop: %v", err)
	}
	m.adopt("sb-d", m.b, backend.Handle{Backend: "stub", ID: "sb-d"})
	if m.count() != 3 {
		t.Fatalf("an adopted sandbox is not counted: %d", m.count())
	}
	if _, ok := m.lookup("sb-b"); ok {
		t.Fatal("lookup found a reserved sandbox the backend has not made")
	}
	if l, ok := m.lookup("sb-d"); !ok || l.h.ID != "sb-d" || l.b != m.b {
		t.Fatalf("lookup of an adopted sandbox: %+v %v", l, ok)
	}
	m.rekey("sb-b", "sb-e")
	if m.setHandle("sb-b", m.b, backend.Handle{ID: "x"}) {
		t.Fatal("setHandle succeeded on a rekeyed-away place")
	}
	if !m.setHandle("sb-e", m.b, backend.Handle{Backend: "stub", ID: "sb-e"}) {
		t.Fatal("setHandle failed on a rekeyed place")
	}
}

// TestKillWhileBooting: a sandbox killed between its record and its boot's
// end is not started behind the stopped record: the boot deletes what it
// made and fails, the record stays stopped and nothing stays live.
func TestKillWhileBooting(t *testing.T) {
	m, b, st := newStubManager(t, Config{}, backend.Capabilities{})
	ctx := context.Background()
	record(t, st, "sb-k", StateStarting)
	if err := m.reserve("sb-k"); err != nil {
		t.Fatal(err)
	}
	if err := m.kill(ctx, "sb-k", "killed"); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, st, "sb-k"); s != StateStopped {
		t.Fatalf("killed while starting: %s, want stopped", s)
	}
	_, err := m.boot(ctx, "sb-k", b, backend.Spec{ID: "sb-k"}, network.Policy{Mode: network.ModeNone}, b.Start, "start failed: ")
	var se *StateError
	if !errors.As(err, &se) {
		t.Fatalf("boot of a killed sandbox: %v, want a StateError", err)
	}
	if !b.wasDeleted("sb-k") {
		t.Error("the boot left the backend's sandbox behind")
	}
	if s := stateOf(t, st, "sb-k"); s != StateStopped {
		t.Errorf("after the boot the record is %s, want stopped", s)
	}
	if m.count() != 0 {
		t.Errorf("%d sandboxes still live", m.count())
	}
	// Nor may a start be recorded over the stop.
	if _, err := m.recordStart(ctx, "sb-k", backend.Handle{Backend: "stub", ID: "sb-k"}); !errors.As(err, &se) {
		t.Fatalf("recordStart over a stopped record: %v, want a StateError", err)
	}
	if s := stateOf(t, st, "sb-k"); s != StateStopped {
		t.Errorf("recordStart changed a stopped record to %s", s)
	}
}

// TestRecoverStopping: a sandbox the old daemon was killing when it went
// away is deleted and recorded stopped by the next daemon, not left
// stopping (and counted) for ever.
func TestRecoverStopping(t *testing.T) {
	m, b, st := newStubManager(t, Config{}, backend.Capabilities{})
	record(t, st, "sb-s", StateStopping)
	record(t, st, "sb-r", StateRunning)
	attached, lost, err := m.Recover(context.Background())
	if err != nil || attached != 2 || lost != 0 {
		t.Fatalf("Recover: %d attached, %d lost, %v", attached, lost, err)
	}
	if s := stateOf(t, st, "sb-s"); s != StateStopped {
		t.Errorf("a stopping sandbox after recovery is %s, want stopped", s)
	}
	if !b.wasDeleted("sb-s") {
		t.Error("the stopping sandbox was not deleted from its backend")
	}
	if s := stateOf(t, st, "sb-r"); s != StateRunning {
		t.Errorf("a running sandbox after recovery is %s", s)
	}
	if ids := m.liveIDs(); len(ids) != 1 || ids[0] != "sb-r" {
		t.Errorf("live after recovery: %v, want [sb-r]", ids)
	}
}

// TestCapabilitiesDecide: the manager refuses pause, fork and auto-pause
// and subscribes to events from Capabilities, even for a backend that
// implements the interfaces.
func TestCapabilitiesDecide(t *testing.T) {
	ctx := context.Background()
	m, b, st := newStubManager(t, Config{}, backend.Capabilities{})
	record(t, st, "sb-c", StateRunning)
	m.adopt("sb-c", b, backend.Handle{Backend: "stub", ID: "sb-c"})
	if _, err := m.pause(ctx, "sb-c"); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("pause on a backend that declares none: %v, want ErrUnsupported", err)
	}
	if b.paused != 0 {
		t.Fatal("the backend was asked to pause against its Capabilities")
	}
	if _, err := m.fork(ctx, "sb-c", ForkRequest{Owner: "p-1", N: 1}); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("fork on a backend that declares none: %v, want ErrUnsupported", err)
	}
	m.forwardEvents("sb-c", backend.Handle{Backend: "stub", ID: "sb-c"})
	if b.events != 0 {
		t.Fatal("events were asked of a backend that declares none")
	}
	req := CreateRequest{Owner: "p-1", AutoPause: true}
	if err := m.validate(&req); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "auto_pause") {
		t.Fatalf("auto_pause on a backend that cannot pause: %v, want ErrInvalid", err)
	}

	b.caps = backend.Capabilities{Pause: true, Events: true}
	m.forwardEvents("sb-c", backend.Handle{Backend: "stub", ID: "sb-c"})
	if b.events != 1 {
		t.Fatal("events not asked of a backend that declares them")
	}
	if _, err := m.pause(ctx, "sb-c"); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, st, "sb-c"); s != StatePaused || b.paused != 1 {
		t.Fatalf("after pause: %s, %d pauses", s, b.paused)
	}
	// Pausing a paused sandbox is a conflict, not a second pause.
	var se *StateError
	if _, err := m.pause(ctx, "sb-c"); !errors.As(err, &se) {
		t.Fatalf("second pause: %v, want a StateError", err)
	}
	if _, err := m.resume(ctx, "sb-c"); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, st, "sb-c"); s != StateRunning {
		t.Fatalf("after resume: %s", s)
	}
}
