package snapshot

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

type noMemory struct{}

func (noMemory) CaptureFS(context.Context, string, func(string) (string, error)) (store.Sandbox, error) {
	return store.Sandbox{}, errors.New("not reached")
}
func (noMemory) TemplatesInUse(context.Context) (map[string]bool, error) { return nil, nil }

type memoryRefused struct{ noMemory }

func (memoryRefused) KeepMemory(context.Context, string) (string, backend.SnapshotRef, error) {
	return "", backend.SnapshotRef{}, errors.Join(backend.ErrUnsupported, errors.New("backend native cannot (capability fork)"))
}
func (memoryRefused) DropMemory(context.Context, string, backend.SnapshotRef) error { return nil }

type memoryKept struct {
	noMemory
	dropped []string
}

func (m *memoryKept) KeepMemory(context.Context, string) (string, backend.SnapshotRef, error) {
	return "gvisor", backend.SnapshotRef{ID: "snap-1", Data: []byte(`{"dir":"/kept/snap-1"}`)}, nil
}
func (m *memoryKept) DropMemory(_ context.Context, b string, ref backend.SnapshotRef) error {
	m.dropped = append(m.dropped, b+" "+ref.ID+" "+string(ref.Data))
	return nil
}

// TestKeepMemoryRefused: a backend that cannot keep memory (native) is the
// service's ErrUnsupported, an invalid request (422 at the API), with the
// backend's reason.
func TestKeepMemoryRefused(t *testing.T) {
	for _, sbx := range []Sandboxes{noMemory{}, memoryRefused{}} {
		s := New(nil, nil, sbx, slog.Default())
		_, err := s.keepMemory(context.Background(), "sb-1")
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%T: %v, want ErrUnsupported", sbx, err)
		}
		if k, _ := errkind.Of(err); k != errkind.Invalid {
			t.Fatalf("%T: kind %v, want Invalid", sbx, k)
		}
	}
}

// TestMemoryRefRoundTrip: the kept reference is recorded as JSON and
// dropMemory hands the same reference back to the backend.
func TestMemoryRefRoundTrip(t *testing.T) {
	mk := &memoryKept{}
	s := New(nil, nil, mk, slog.Default())
	mem, err := s.keepMemory(context.Background(), "sb-1")
	if err != nil || mem.backend != "gvisor" {
		t.Fatalf("keepMemory: %+v %v", mem, err)
	}
	ref, err := MemoryRef(store.Snapshot{MemoryRef: mem.ref})
	if err != nil || ref.ID != "snap-1" {
		t.Fatalf("MemoryRef: %+v %v", ref, err)
	}
	s.dropMemory(mem)
	s.dropMemory(memoryImage{}) // none: nothing
	if len(mk.dropped) != 1 || mk.dropped[0] != `gvisor snap-1 {"dir":"/kept/snap-1"}` {
		t.Fatalf("dropped %q", mk.dropped)
	}
}
