package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunUsage runs the conformance tests of store.UsageStore against stores
// returned by open.
func RunUsage(t *testing.T, open func(t *testing.T) store.UsageStore) {
	t.Run("LLMUsage", func(t *testing.T) { testLLMUsage(t, open(t)) })
	t.Run("Settings", func(t *testing.T) { testUsageSettings(t, open(t)) })
	t.Run("AuditCheckpoints", func(t *testing.T) { testAuditCheckpoints(t, open(t)) })
}

func testLLMUsage(t *testing.T, s store.UsageStore) {
	rows := []store.LLMUsage{
		{PrincipalID: "alice", Agent: "bot", Day: "2026-12-01", Provider: "openai", Model: "gpt", Calls: 1, TokensIn: 10, TokensOut: 5, CostMicros: 100},
		{PrincipalID: "alice", Agent: "", Day: "2026-12-02", Provider: "openai", Model: "gpt", Calls: 1, TokensIn: 1, TokensOut: 1, CostMicros: 2},
		{PrincipalID: "bob", Agent: "bot", Day: "2026-11-30", Provider: "anthropic", Model: "claude", Calls: 1, TokensIn: 7, TokensOut: 3, CostMicros: 50},
	}
	// Parallel adds to one row all count.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := s.AddLLMUsage(ctx(t), rows[0]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, r := range rows[1:] {
		if err := s.AddLLMUsage(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddLLMUsage(ctx(t), store.LLMUsage{Day: "2026-12-01", Model: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no principal: %v", err)
	}
	all, err := s.ListLLMUsage(ctx(t), store.LLMUsageFilter{})
	if err != nil || len(all) != 3 || all[0].PrincipalID != "bob" || all[1].Calls != 8 || all[1].TokensIn != 80 || all[1].CostMicros != 800 {
		t.Fatalf("list all: %+v %v", all, err)
	}
	for _, c := range []struct {
		f            store.LLMUsageFilter
		tokens, cost int64
	}{
		{store.LLMUsageFilter{Principals: []string{"alice"}}, 120 + 2, 802},
		{store.LLMUsageFilter{Principals: []string{"alice", "bob"}, FromDay: "2026-12-01", ToDay: "2026-12-01"}, 120, 800},
		{store.LLMUsageFilter{Agent: "bot"}, 120 + 10, 850},
		{store.LLMUsageFilter{FromDay: "2026-12-02"}, 2, 2},
		{store.LLMUsageFilter{Principals: []string{"carol"}}, 0, 0},
	} {
		tok, cost, err := s.SumLLMUsage(ctx(t), c.f)
		if err != nil || tok != c.tokens || cost != c.cost {
			t.Errorf("sum %+v: %d %d %v, want %d %d", c.f, tok, cost, err, c.tokens, c.cost)
		}
	}
}

func testUsageSettings(t *testing.T, s store.UsageStore) {
	if _, err := s.GetUsageSetting(ctx(t), "llm.prices"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unset: %v", err)
	}
	if err := s.PutUsageSetting(ctx(t), store.UsageSetting{Name: "llm.prices", Value: json.RawMessage(`[1]`), UpdatedAt: base, UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUsageSetting(ctx(t), store.UsageSetting{Name: "llm.prices", Value: json.RawMessage(`[2]`), UpdatedAt: base, UpdatedBy: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUsageSetting(ctx(t), store.UsageSetting{Name: "x", Value: json.RawMessage(`{`), UpdatedAt: base}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bad json: %v", err)
	}
	got, err := s.GetUsageSetting(ctx(t), "llm.prices")
	if err != nil || string(got.Value) != "[2]" || got.UpdatedBy != "bob" || !got.UpdatedAt.Equal(base) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := s.DeleteUsageSetting(ctx(t), "llm.prices"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUsageSetting(ctx(t), "llm.prices"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func testAuditCheckpoints(t *testing.T, s store.UsageStore) {
	cp := func(n int64) store.AuditCheckpoint {
		return store.AuditCheckpoint{N: n, Size: n * 10, Root: "cm9vdA==", Note: "note", CreatedAt: base}
	}
	if err := s.AddAuditCheckpoint(ctx(t), cp(2)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("first is 2: %v", err)
	}
	for n := int64(1); n <= 3; n++ {
		if err := s.AddAuditCheckpoint(ctx(t), cp(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddAuditCheckpoint(ctx(t), cp(3)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("repeat: %v", err)
	}
	got, err := s.ListAuditCheckpoints(ctx(t))
	if err != nil || len(got) != 3 || got[2].N != 3 || got[2].Size != 30 || !got[2].CreatedAt.Equal(base) {
		t.Fatalf("list: %+v %v", got, err)
	}
}
