package storetest

import (
	"errors"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunMemoryTeams runs the conformance tests of store.MemoryTeamStore
// against stores returned by open.
func RunMemoryTeams(t *testing.T, open func(t *testing.T) store.MemoryTeamStore) {
	t.Run("Claim", func(t *testing.T) {
		s := open(t)
		ctx := t.Context()
		if _, err := s.GetMemoryTeam(ctx, "ops"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get before a claim: %v, want ErrNotFound", err)
		}
		got, err := s.ClaimMemoryTeam(ctx, "ops", "alice", base)
		if err != nil || got != "alice" {
			t.Fatalf("first claim = %q, %v; want alice", got, err)
		}
		// A later claim by another owner leaves the first owner.
		got, err = s.ClaimMemoryTeam(ctx, "ops", "bob", base.Add(1))
		if err != nil || got != "alice" {
			t.Fatalf("second claim = %q, %v; want alice", got, err)
		}
		if owner, err := s.GetMemoryTeam(ctx, "ops"); err != nil || owner != "alice" {
			t.Fatalf("get = %q, %v; want alice", owner, err)
		}
		if got, err := s.ClaimMemoryTeam(ctx, "dev", "bob", base); err != nil || got != "bob" {
			t.Fatalf("claim of another team = %q, %v; want bob", got, err)
		}
		if _, err := s.ClaimMemoryTeam(ctx, "", "bob", base); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("claim without a name: %v, want ErrInvalid", err)
		}
	})
}
