package usage

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

var t0 = time.Date(2026, 12, 2, 3, 59, 50, 0, time.UTC)

func reading(id string, st sandbox.State, at time.Time, cpu, mem int64, out, in uint64) sandbox.Reading {
	return sandbox.Reading{ID: id, Owner: "p-" + id, Template: "base", State: st, At: at,
		Usage: backend.Usage{CPUNanos: cpu, MemoryBytes: mem, DiskBytes: 4096}, HasUsage: true,
		Net: network.Stats{BytesOut: out, BytesIn: in}, HasNet: true}
}

func TestAdvance(t *testing.T) {
	prev := store.SandboxMeter{SandboxID: "sb", State: "running", At: t0, CPUNanos: 1e9, MemoryBytes: 100 << 20,
		EgressBytesOut: 10, EgressBytesIn: 20}
	d, next := advance(prev, reading("sb", sandbox.StatePaused, t0.Add(4*time.Second), 3e9, 300<<20, 15, 50))
	want := delta{cpuNanos: 2e9, memoryByteSeconds: 200 << 20 * 4, egressOut: 5, egressIn: 30, runningMillis: 4000, diskBytes: 4096}
	if d != want {
		t.Fatalf("delta %+v, want %+v", d, want)
	}
	if next.State != "paused" || next.CPUNanos != 3e9 || next.MemoryBytes != 300<<20 || !next.At.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("next %+v", next)
	}
	// Paused time counts as paused; counters that went down started again
	// (a cold resume's new cgroup and link).
	d, next = advance(next, reading("sb", sandbox.StateRunning, t0.Add(6*time.Second), 5e8, 0, 3, 4))
	if d.pausedMillis != 2000 || d.runningMillis != 0 || d.cpuNanos != 5e8 || d.egressOut != 3 || d.egressIn != 4 {
		t.Fatalf("after a restart of the counters: %+v", d)
	}
	// No reading from the backend: the counters are kept, time still counts.
	r := sandbox.Reading{ID: "sb", State: sandbox.StateRunning, At: t0.Add(7 * time.Second)}
	d, next2 := advance(next, r)
	if d.cpuNanos != 0 || d.runningMillis != 1000 || next2.CPUNanos != next.CPUNanos || next2.EgressBytesOut != 0 {
		t.Fatalf("without a reading: %+v next %+v", d, next2)
	}
}

func TestSplitHours(t *testing.T) {
	m := store.SandboxMeter{SandboxID: "sb", PrincipalID: "alice"}
	d := delta{cpuNanos: 1000, memoryByteSeconds: 999, runningMillis: 20000, egressOut: 7, diskBytes: 5}
	// 10 s before the hour, 10 s after it: halves, exact sums.
	got := split(d, m, t0, t0.Add(20*time.Second))
	if len(got) != 2 || !got[0].Hour.Equal(t0.Truncate(time.Hour)) || !got[1].Hour.Equal(t0.Truncate(time.Hour).Add(time.Hour)) {
		t.Fatalf("hours %+v", got)
	}
	if got[0].CPUNanos != 500 || got[0].CPUNanos+got[1].CPUNanos != 1000 || got[0].MemoryByteSeconds+got[1].MemoryByteSeconds != 999 ||
		got[0].RunningMillis != 10000 || got[1].RunningMillis != 10000 || got[0].EgressBytesOut+got[1].EgressBytesOut != 7 ||
		got[0].DiskBytes != 5 || got[1].DiskBytes != 5 {
		t.Fatalf("split %+v", got)
	}
	// Within one hour: one bucket.
	if got := split(d, m, t0.Add(-time.Minute), t0); len(got) != 1 || got[0].CPUNanos != 1000 {
		t.Fatalf("one hour %+v", got)
	}
	// Three hours and more (a daemon down for a while).
	got = split(d, m, t0, t0.Add(2*time.Hour+time.Minute))
	var sum int64
	for _, u := range got {
		sum += u.RunningMillis
	}
	if len(got) != 4 || sum != 20000 {
		t.Fatalf("long split %+v", got)
	}
}

// fakeSource is a Source over fixed readings.
type fakeSource struct {
	mu       sync.Mutex
	readings map[string]sandbox.Reading
	states   map[string]string
}

func (f *fakeSource) Readings(context.Context) ([]sandbox.Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Reading
	for _, r := range f.readings {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeSource) ReadingOf(_ context.Context, id string) (sandbox.Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.readings[id]
	if !ok {
		return r, sandbox.ErrNotFound
	}
	return r, nil
}

func (f *fakeSource) Get(_ context.Context, id string) (store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.states[id]
	if !ok {
		return store.Sandbox{}, sandbox.ErrNotFound
	}
	return store.Sandbox{ID: id, State: st}, nil
}

func (f *fakeSource) set(r sandbox.Reading) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readings[r.ID] = r
	f.states[r.ID] = string(r.State)
}

type principals map[string]store.Principal

func (p principals) GetPrincipal(_ context.Context, id string) (store.Principal, error) {
	if v, ok := p[id]; ok {
		return v, nil
	}
	return store.Principal{}, store.ErrNotFound
}

func openStore(t *testing.T, dir string) *sqlite.Store {
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sumOf(t *testing.T, st store.SandboxUsageStore, id string) store.SandboxUsage {
	t.Helper()
	rows, err := st.ListSandboxUsage(t.Context(), store.SandboxUsageFilter{Sandbox: id})
	if err != nil {
		t.Fatal(err)
	}
	var s store.SandboxUsage
	for _, r := range rows {
		s.SandboxID, s.PrincipalID, s.Agent = r.SandboxID, r.PrincipalID, r.Agent
		s.CPUNanos += r.CPUNanos
		s.MemoryByteSeconds += r.MemoryByteSeconds
		s.EgressBytesOut += r.EgressBytesOut
		s.EgressBytesIn += r.EgressBytesIn
		s.RunningMillis += r.RunningMillis
		s.PausedMillis += r.PausedMillis
		s.DiskBytes = max(s.DiskBytes, r.DiskBytes)
	}
	return s
}

// TestMeterLifecycle: a sandbox's first reading counts from its start, a
// pause splits its time, a restarted meter (a daemon restart) goes on from
// the stored reading without counting twice, the final reading ends it
// and a late reading is dropped.
func TestMeterLifecycle(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	src := &fakeSource{readings: map[string]sandbox.Reading{}, states: map[string]string{}}
	who := principals{"p-sb1": {ID: "p-sb1", Kind: store.PrincipalAgent, Name: "coder"}}
	m, err := New(t.Context(), Config{Store: st, Principals: who})
	if err != nil {
		t.Fatal(err)
	}
	m.SetSource(src)
	start := t0.Add(-10 * time.Second)
	r := reading("sb1", sandbox.StateRunning, t0, 2e9, 1<<30, 100, 200)
	r.Started = start
	src.set(r)
	m.Tick(t.Context())
	s := sumOf(t, st, "sb1")
	if s.CPUNanos != 2e9 || s.RunningMillis != 10000 || s.Agent != "coder" || s.PrincipalID != "p-sb1" || s.EgressBytesOut != 100 {
		t.Fatalf("after the first reading: %+v", s)
	}
	// Paused (Changed reads it at once), then 10 s paused.
	r = reading("sb1", sandbox.StatePaused, t0.Add(5*time.Second), 3e9, 1<<30, 100, 200)
	src.set(r)
	m.readOne(t.Context(), "sb1")
	// The daemon restarts: a new meter on the same store; the sandbox's
	// cgroup counted on, its network link is a new one.
	r = reading("sb1", sandbox.StatePaused, t0.Add(15*time.Second), 3e9, 1<<30, 0, 0)
	src.set(r)
	st.Close()
	st = openStore(t, dir)
	defer st.Close()
	m, err = New(t.Context(), Config{Store: st, Principals: who})
	if err != nil {
		t.Fatal(err)
	}
	m.SetSource(src)
	m.Tick(t.Context())
	s = sumOf(t, st, "sb1")
	if s.CPUNanos != 3e9 || s.RunningMillis != 15000 || s.PausedMillis != 10000 {
		t.Fatalf("after the pause and a restart: %+v", s)
	}
	// 15 s at 1 GiB from t0 to t0+15s, plus 10 s ramping from 0 before it
	// (the first reading's mean with the start's zero).
	if want := int64(15<<30 + 5<<30); s.MemoryByteSeconds != want {
		t.Fatalf("memory byte-seconds %d, want %d", s.MemoryByteSeconds, want)
	}
	// The final reading, then a late tick that still has it.
	final := reading("sb1", sandbox.StateStopping, t0.Add(16*time.Second), 4e9, 0, 50, 0)
	m.Observe(final, true)
	src.states["sb1"] = "stopped"
	late := reading("sb1", sandbox.StateRunning, t0.Add(15500*time.Millisecond), 3e9, 0, 60, 0)
	m.record(t.Context(), []sandbox.Reading{late}, nil)
	s = sumOf(t, st, "sb1")
	if s.CPUNanos != 4e9 || s.PausedMillis != 11000 || s.EgressBytesOut != 150 || s.EgressBytesIn != 200 {
		t.Fatalf("after the end: %+v", s)
	}
	if ms, _ := st.ListSandboxMeters(t.Context()); len(ms) != 0 {
		t.Fatalf("meters left after the end: %+v", ms)
	}
	// Prometheus: the ended sandbox is folded into its owner's series.
	m.tot.mu.Lock()
	o := m.tot.owners[ownerKey{"p-sb1", "coder"}]
	live := len(m.tot.sandbox)
	m.tot.mu.Unlock()
	if o == nil || o.cpuNanos != 1e9 || live != 0 { // this meter (since the restart) saw 3e9 to 4e9
		t.Fatalf("totals %+v live %d", o, live)
	}
}

// TestMeterLetsLostGo: a sandbox that ended without a final reading (lost)
// is let go at the next tick.
func TestMeterLetsLostGo(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	src := &fakeSource{readings: map[string]sandbox.Reading{}, states: map[string]string{}}
	m, err := New(t.Context(), Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	m.SetSource(src)
	src.set(reading("sb2", sandbox.StateRunning, t0, 1, 1, 0, 0))
	src.set(reading("sb3", sandbox.StateRunning, t0, 1, 1, 0, 0))
	m.Tick(t.Context())
	delete(src.readings, "sb2")
	src.states["sb2"] = "lost"
	delete(src.readings, "sb3")
	src.states["sb3"] = "stopping" // its final reading is still to come
	m.Tick(t.Context())
	ms, _ := st.ListSandboxMeters(t.Context())
	var ids []string
	for _, x := range ms {
		ids = append(ids, x.SandboxID)
	}
	if !reflect.DeepEqual(ids, []string{"sb3"}) {
		t.Fatalf("meters %v, want [sb3]", ids)
	}
}
