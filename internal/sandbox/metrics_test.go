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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

// fakeBackend reports usage from a table and pauses as told; what the
// metrics tests do not reach is left to the nil embedded interface.
type fakeBackend struct {
	backend.Backend
	mu       sync.Mutex
	usage    map[string]backend.Usage // by handle id; absent: an error
	calls    int
	pauseErr error
	events   chan backend.Event
}

func (f *fakeBackend) ID() string { return "fake" }
func (f *fakeBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Pause: true, Events: true}
}
func (f *fakeBackend) Usage(_ context.Context, h backend.Handle) (backend.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	u, ok := f.usage[h.ID]
	if !ok {
		return backend.Usage{}, errors.New("no such sandbox")
	}
	return u, nil
}
func (f *fakeBackend) Pause(context.Context, backend.Handle) error  { return f.pauseErr }
func (f *fakeBackend) Resume(context.Context, backend.Handle) error { return nil }
func (f *fakeBackend) Events(context.Context, backend.Handle) (<-chan backend.Event, error) {
	return f.events, nil
}

type noTemplates struct{}

func (noTemplates) Get(name string) (*template.Template, error) { return nil, template.ErrUnknown }

func newTestManager(t *testing.T, cfg Config) (*Manager, *fakeBackend, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreatePrincipal(context.Background(), store.Principal{ID: "p-1", Kind: store.PrincipalUser, Name: "u", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{usage: map[string]backend.Usage{}, events: make(chan backend.Event, 1)}
	return New(cfg, st, fb, noTemplates{}, slog.New(slog.NewTextHandler(io.Discard, nil))), fb, st
}

// addLive records a sandbox in state and gives the manager its handle.
func addLive(t *testing.T, m *Manager, st store.Store, id string, state State) {
	t.Helper()
	now := time.Now().UTC()
	if err := st.CreateSandbox(context.Background(), store.Sandbox{ID: id, Owner: "p-1", Template: "base", State: string(state), Backend: "fake",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	m.adopt(id, m.b, backend.Handle{Backend: "fake", ID: "h-" + id})
}

func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// TestUsageCollector: every live sandbox with a handle gets its CPU, memory
// and OOM series, labelled sandbox, template and isolation; one whose usage
// cannot be read, one without a handle and an ended one are left out, and
// the scrape reads each live sandbox once.
func TestUsageCollector(t *testing.T) {
	m, fb, st := newTestManager(t, Config{})
	for i := range 10 {
		id := fmt.Sprintf("sb-%02d", i)
		state := StateRunning
		if i == 3 {
			state = StatePaused
		}
		addLive(t, m, st, id, state)
		fb.usage["h-"+id] = backend.Usage{CPUNanos: int64(i+1) * 5e8, MemoryBytes: int64(i+1) << 20, MemoryPeak: int64(i+2) << 20, OOMEvents: int64(i % 2)}
	}
	addLive(t, m, st, "sb-unreadable", StateRunning) // no usage: Usage fails
	now := time.Now().UTC()
	st.CreateSandbox(context.Background(), store.Sandbox{ID: "sb-nohandle", Owner: "p-1", Template: "base", State: string(StateRunning), CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	addLive(t, m, st, "sb-ended", StateStopped)
	fb.usage["h-sb-ended"] = backend.Usage{CPUNanos: 1}

	fams := gather(t, m.Collectors()[1])
	for name, want := range map[string]int{"warden_sandbox_cpu_seconds_total": 10, "warden_sandbox_memory_bytes": 10, "warden_sandbox_memory_peak_bytes": 10, "warden_sandbox_oom_kills_total": 10} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != want {
			t.Fatalf("%s: %v, want %d series", name, f, want)
		}
	}
	for _, s := range fams["warden_sandbox_cpu_seconds_total"].GetMetric() {
		l := labelsOf(s)
		var i int
		if _, err := fmt.Sscanf(l["sandbox"], "sb-%02d", &i); err != nil || l["template"] != "base" || l["isolation"] != "fake" {
			t.Fatalf("labels %v", l)
		}
		if got, want := s.GetCounter().GetValue(), float64(i+1)*0.5; got != want {
			t.Errorf("%s cpu seconds %v, want %v", l["sandbox"], got, want)
		}
	}
	for _, s := range fams["warden_sandbox_memory_bytes"].GetMetric() {
		var i int
		fmt.Sscanf(labelsOf(s)["sandbox"], "sb-%02d", &i)
		if got := s.GetGauge().GetValue(); got != float64(int64(i+1)<<20) {
			t.Errorf("%s memory %v", labelsOf(s)["sandbox"], got)
		}
	}
	if fb.calls != 11 {
		t.Errorf("the scrape read usage %d times, want once per live sandbox with a handle (11)", fb.calls)
	}
}

// TestOpsCollector: pause and resume are timed by backend and outcome, a
// create the pool could serve but cannot counts as a miss, OOM events count,
// and the pool's size and target are reported.
func TestOpsCollector(t *testing.T) {
	m, fb, st := newTestManager(t, Config{PoolSize: 2})
	addLive(t, m, st, "sb-a", StateRunning)
	if _, err := m.Pause(context.Background(), "sb-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(context.Background(), "sb-a"); err != nil {
		t.Fatal(err)
	}
	fb.pauseErr = errors.New("freezer stuck")
	if _, err := m.Pause(context.Background(), "sb-a"); err == nil {
		t.Fatal("pause did not fail")
	}
	if _, err := m.Pause(context.Background(), "sb-missing"); err == nil {
		t.Fatal("pause of an unknown sandbox did not fail")
	}
	if _, ok := m.claim(CreateRequest{Template: template.BaseName, Isolation: "fake"}); ok {
		t.Fatal("claimed from an empty pool")
	}
	if _, ok := m.claim(CreateRequest{Template: "other", Isolation: "fake"}); ok {
		t.Fatal("claimed for another template")
	}
	m.forwardEvents("sb-a", backend.Handle{Backend: "fake", ID: "h-sb-a"})
	fb.events <- backend.Event{Kind: "oom"}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.met.oom.WithLabelValues("fake")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the OOM event was not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(fb.events)

	c := m.Collectors()[0]
	want := `
# HELP warden_pool_misses_total Creates that could use the warm pool but booted a sandbox (pool empty, or the pooled sandbox was unusable).
# TYPE warden_pool_misses_total counter
warden_pool_misses_total 1
# HELP warden_pool_hits_total Creates that could use the warm pool and got a pre-started sandbox from it.
# TYPE warden_pool_hits_total counter
warden_pool_hits_total 0
# HELP warden_pool_size Started sandboxes waiting in the warm pool.
# TYPE warden_pool_size gauge
warden_pool_size{template="base"} 0
# HELP warden_pool_target How many sandboxes the warm pool keeps started (--pool-size).
# TYPE warden_pool_target gauge
warden_pool_target{template="base"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "warden_pool_misses_total", "warden_pool_hits_total", "warden_pool_size", "warden_pool_target"); err != nil {
		t.Error(err)
	}
	fams := gather(t, c)
	counts := map[string]uint64{}
	for _, s := range fams["warden_sandbox_operation_duration_seconds"].GetMetric() {
		l := labelsOf(s)
		counts[l["op"]+"/"+l["isolation"]+"/"+l["outcome"]] += s.GetHistogram().GetSampleCount()
	}
	// The unknown sandbox's pause is no operation: not counted.
	if counts["pause/fake/success"] != 1 || counts["resume/fake/success"] != 1 || counts["pause/fake/error"] != 1 || len(counts) != 3 {
		t.Errorf("operation counts %v", counts)
	}
}
