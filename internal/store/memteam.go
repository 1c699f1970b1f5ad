package store

import (
	"context"
	"time"
)

// MemoryTeamStore keeps who owns each team memory of hosted agents
// (internal/agents, docs/memory.md): a team belongs to the owner of the
// first agent that named it.
type MemoryTeamStore interface {
	// ClaimMemoryTeam records owner as the owner of team name unless it
	// has one already, and returns the team's owner either way.
	ClaimMemoryTeam(ctx context.Context, name, owner string, at time.Time) (string, error)
	// GetMemoryTeam returns a team's owner (ErrNotFound: no such team).
	GetMemoryTeam(ctx context.Context, name string) (string, error)
}
