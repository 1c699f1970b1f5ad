package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// AuditRetentionStores is what RunAuditRetention needs of a store: the
// events, the checkpoints and the anchor.
type AuditRetentionStores interface {
	store.Store
	store.UsageStore
	store.SandboxUsageStore
	store.AuditRetentionStore
	store.UsageRetentionStore
}

// RunAuditRetention runs the conformance tests of
// store.AuditRetentionStore against stores returned by open.
func RunAuditRetention(t *testing.T, open func(t *testing.T) AuditRetentionStores) {
	t.Run("Prune", func(t *testing.T) { testPruneAudit(t, open(t)) })
	t.Run("PruneUsage", func(t *testing.T) { testPruneUsage(t, open(t)) })
}

func testPruneUsage(t *testing.T, s AuditRetentionStores) {
	for _, day := range []string{"2026-11-29", "2026-11-30", "2026-12-01"} {
		if err := s.AddLLMUsage(ctx(t), store.LLMUsage{PrincipalID: "alice", Day: day, Provider: "openai", Model: "gpt", Calls: 1}); err != nil {
			t.Fatal(err)
		}
	}
	h := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var buckets []store.SandboxUsage
	for i := range 3 {
		buckets = append(buckets, store.SandboxUsage{SandboxID: "sb-1", Hour: h.Add(time.Duration(i) * time.Hour), PrincipalID: "alice", CPUNanos: 1})
	}
	if err := s.RecordSandboxUsage(ctx(t), buckets, nil, nil); err != nil {
		t.Fatal(err)
	}
	// 2026-12-01 11:30: the 10:00 hour ended, 11:00 did not; days before
	// 2026-12-01 go.
	llm, sb, err := s.PruneUsage(ctx(t), h.Add(90*time.Minute))
	if err != nil || llm != 2 || sb != 1 {
		t.Fatalf("PruneUsage: %d %d %v", llm, sb, err)
	}
	rows, err := s.ListLLMUsage(ctx(t), store.LLMUsageFilter{})
	if err != nil || len(rows) != 1 || rows[0].Day != "2026-12-01" {
		t.Fatalf("llm usage left: %+v %v", rows, err)
	}
	left, err := s.ListSandboxUsage(ctx(t), store.SandboxUsageFilter{})
	if err != nil || len(left) != 2 || !left[0].Hour.Equal(h.Add(time.Hour)) {
		t.Fatalf("sandbox usage left: %+v %v", left, err)
	}
	if llm, sb, err := s.PruneUsage(ctx(t), h.Add(90*time.Minute)); err != nil || llm+sb != 0 {
		t.Fatalf("PruneUsage again: %d %d %v", llm, sb, err)
	}
}

func testPruneAudit(t *testing.T, s AuditRetentionStores) {
	if _, err := s.GetAuditAnchor(ctx(t)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("anchor of a new store: %v", err)
	}
	for seq := int64(1); seq <= 10; seq++ {
		if err := s.AppendAudit(ctx(t), store.AuditEvent{Seq: seq, Time: base, Action: "a", Outcome: "success",
			PrevHash: fmt.Sprint("h", seq-1), Hash: fmt.Sprint("h", seq)}); err != nil {
			t.Fatal(err)
		}
	}
	for n, size := range []int64{4, 7, 10} {
		if err := s.AddAuditCheckpoint(ctx(t), store.AuditCheckpoint{N: int64(n + 1), Size: size, Root: "cm9vdA==", Note: "note", CreatedAt: base}); err != nil {
			t.Fatal(err)
		}
	}
	a := store.AuditAnchor{Size: 4, Hash: "h4", CheckpointN: 1, Nodes: map[string]string{"2/0": "aGFzaA=="}, MAC: "mac", PrunedAt: base}
	for _, bad := range []store.AuditAnchor{
		{Size: 4, Hash: "h4", CheckpointN: 2, Nodes: a.Nodes, MAC: "mac", PrunedAt: base},   // checkpoint of another size
		{Size: 4, Hash: "h4", CheckpointN: 9, Nodes: a.Nodes, MAC: "mac", PrunedAt: base},   // no such checkpoint
		{Size: 10, Hash: "h10", CheckpointN: 3, Nodes: a.Nodes, MAC: "mac", PrunedAt: base}, // the newest event must stay
		{Size: 4, Hash: "h4", CheckpointN: 1, Nodes: a.Nodes, PrunedAt: base},               // no mac
	} {
		if _, err := s.PruneAudit(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("PruneAudit(%+v): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.GetAuditAnchor(ctx(t)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused prune left an anchor: %v", err)
	}
	if n, err := s.PruneAudit(ctx(t), a); err != nil || n != 4 {
		t.Fatalf("prune to 4: %d %v", n, err)
	}
	got, err := s.GetAuditAnchor(ctx(t))
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("anchor: %+v %v, want %+v", got, err, a)
	}
	var seqs []int64
	if err := s.WalkAudit(ctx(t), func(e store.AuditEvent) error { seqs = append(seqs, e.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seqs, []int64{5, 6, 7, 8, 9, 10}) {
		t.Fatalf("events left: %v", seqs)
	}
	// Idempotent: the same prune again does nothing.
	if n, err := s.PruneAudit(ctx(t), a); err != nil || n != 0 {
		t.Fatalf("prune to 4 again: %d %v", n, err)
	}
	// Never backwards, nor to the same size with another anchor.
	for _, bad := range []store.AuditAnchor{
		{Size: 4, Hash: "other", CheckpointN: 1, Nodes: a.Nodes, MAC: "mac", PrunedAt: base},
	} {
		if _, err := s.PruneAudit(ctx(t), bad); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("PruneAudit(%+v): %v, want ErrConflict", bad, err)
		}
	}
	b := store.AuditAnchor{Size: 7, Hash: "h7", CheckpointN: 2, Nodes: map[string]string{}, MAC: "mac2", PrunedAt: base.Add(1)}
	if n, err := s.PruneAudit(ctx(t), b); err != nil || n != 3 {
		t.Fatalf("prune to 7: %d %v", n, err)
	}
	if got, err := s.GetAuditAnchor(ctx(t)); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("anchor: %+v %v, want %+v", got, err, b)
	}
	if _, err := s.PruneAudit(ctx(t), a); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("prune back to 4: %v", err)
	}
	if last, err := s.LastAudit(ctx(t)); err != nil || last.Seq != 10 {
		t.Fatalf("last event: %+v %v", last, err)
	}
}
