package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunSandboxUsage runs the conformance tests of store.SandboxUsageStore
// against stores returned by open.
func RunSandboxUsage(t *testing.T, open func(t *testing.T) store.SandboxUsageStore) {
	t.Run("Buckets", func(t *testing.T) { testSandboxUsageBuckets(t, open(t)) })
	t.Run("Meters", func(t *testing.T) { testSandboxMeters(t, open(t)) })
}

func testSandboxUsageBuckets(t *testing.T, s store.SandboxUsageStore) {
	h0 := base.Truncate(time.Hour)
	h1 := h0.Add(time.Hour)
	a := store.SandboxUsage{SandboxID: "sb-a", Hour: h0, PrincipalID: "alice", Template: "base", CPUNanos: 10,
		MemoryByteSeconds: 100, EgressBytesOut: 1, EgressBytesIn: 2, RunningMillis: 1000, PausedMillis: 0, DiskBytes: 50}
	b := store.SandboxUsage{SandboxID: "sb-b", Hour: h1, PrincipalID: "bot", Agent: "coder", Template: "base", CPUNanos: 7,
		PausedMillis: 500, DiskBytes: 9}
	if err := s.RecordSandboxUsage(ctx(t), []store.SandboxUsage{a, b}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// A second sample of the same hour adds up; the disk keeps the most.
	a2 := a
	a2.Hour = h0.Add(30 * time.Minute) // stored under its hour
	a2.DiskBytes = 40
	if err := s.RecordSandboxUsage(ctx(t), []store.SandboxUsage{a2}, nil, nil); err != nil {
		t.Fatal(err)
	}
	all, err := s.ListSandboxUsage(ctx(t), store.SandboxUsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantA := store.SandboxUsage{SandboxID: "sb-a", Hour: h0, PrincipalID: "alice", Template: "base", CPUNanos: 20,
		MemoryByteSeconds: 200, EgressBytesOut: 2, EgressBytesIn: 4, RunningMillis: 2000, DiskBytes: 50}
	if want := []store.SandboxUsage{wantA, b}; !reflect.DeepEqual(all, want) {
		t.Fatalf("rows:\n got %+v\nwant %+v", all, want)
	}
	for _, tc := range []struct {
		name string
		f    store.SandboxUsageFilter
		want []string
	}{
		{"sandbox", store.SandboxUsageFilter{Sandbox: "sb-b"}, []string{"sb-b"}},
		{"principals", store.SandboxUsageFilter{Principals: []string{"alice", "carol"}}, []string{"sb-a"}},
		{"agent", store.SandboxUsageFilter{Agent: "coder"}, []string{"sb-b"}},
		{"from inside the first hour", store.SandboxUsageFilter{From: h0.Add(10 * time.Minute)}, []string{"sb-a", "sb-b"}},
		{"from the second hour", store.SandboxUsageFilter{From: h1}, []string{"sb-b"}},
		{"to the second hour", store.SandboxUsageFilter{To: h1}, []string{"sb-a"}},
		{"to inside the second hour", store.SandboxUsageFilter{To: h1.Add(time.Minute)}, []string{"sb-a", "sb-b"}},
	} {
		rows, err := s.ListSandboxUsage(ctx(t), tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.SandboxID)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := s.RecordSandboxUsage(ctx(t), []store.SandboxUsage{{Hour: h0}}, nil, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a bucket without a sandbox: %v, want ErrInvalid", err)
	}
}

func testSandboxMeters(t *testing.T, s store.SandboxUsageStore) {
	m1 := store.SandboxMeter{SandboxID: "sb-a", PrincipalID: "alice", Template: "base", State: "running", At: base,
		CPUNanos: 5, MemoryBytes: 6, EgressBytesOut: 7, EgressBytesIn: 8}
	m2 := store.SandboxMeter{SandboxID: "sb-b", PrincipalID: "bot", Agent: "coder", State: "paused", At: base.Add(time.Second)}
	if err := s.RecordSandboxUsage(ctx(t), nil, []store.SandboxMeter{m1, m2}, nil); err != nil {
		t.Fatal(err)
	}
	m1.CPUNanos, m1.At = 50, base.Add(5*time.Second)
	if err := s.RecordSandboxUsage(ctx(t), nil, []store.SandboxMeter{m1}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListSandboxMeters(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.SandboxMeter{m1, m2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("meters:\n got %+v\nwant %+v", got, want)
	}
	// An ended sandbox's meter goes in the same transaction as its last bucket.
	last := store.SandboxUsage{SandboxID: "sb-a", Hour: base, PrincipalID: "alice", CPUNanos: 1}
	if err := s.RecordSandboxUsage(ctx(t), []store.SandboxUsage{last}, nil, []string{"sb-a"}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.ListSandboxMeters(ctx(t)); err != nil || len(got) != 1 || got[0].SandboxID != "sb-b" {
		t.Fatalf("meters after sb-a ended: %+v, %v", got, err)
	}
	// A failing part undoes the whole record.
	bad := []store.SandboxUsage{{SandboxID: "sb-c", Hour: base}, {Hour: base}}
	if err := s.RecordSandboxUsage(ctx(t), bad, nil, []string{"sb-b"}); err == nil {
		t.Fatal("a record with an invalid bucket succeeded")
	}
	if got, _ = s.ListSandboxMeters(ctx(t)); len(got) != 1 {
		t.Fatalf("a failed record deleted a meter: %+v", got)
	}
	if rows, _ := s.ListSandboxUsage(ctx(t), store.SandboxUsageFilter{Sandbox: "sb-c"}); len(rows) != 0 {
		t.Fatalf("a failed record wrote %+v", rows)
	}
}
